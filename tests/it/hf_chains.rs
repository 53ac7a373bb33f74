//! Fused chains, a residual add into a norm (`add_rmsnorm`, `add_layernorm`), from the plug's
//! side (`tests/python/chain_plugs_check.py`): verification plugs the starters into tiny
//! random-weight HF Llama, GPT-2 and BERT; the fused add gives the model's own result
//! whatever its code does between the add and the norm (TorchScript included); two chain
//! plugs at one shape each fuse their own norm's chain; under torch.compile the graph pass
//! puts the kernel in place of the add and the norm; a kernel whose sum is wrong is left
//! out by the plug check. The plan's side is `tests/it/hf_models.rs` (each family's chain
//! planned by `run` and plugged in) and `rank.rs`'s unit tests.

use crate::util::python_check;

/// Runs one check of `chain_plugs_check.py`.
fn check(name: &str) {
    python_check("chain_plugs_check.py", name);
}

#[test]
fn verification_plugs_the_fused_add_norm_starters_into_llama_gpt2_and_bert() {
    check("plugged");
}

#[test]
fn a_fused_add_gives_the_model_its_sum_whatever_reads_it_and_the_norm_its_own_result() {
    check("fused");
}

#[test]
fn two_chain_plugs_at_one_shape_each_take_their_own_norms_chain() {
    check("two_norms");
}

#[test]
fn under_torch_compile_the_graph_pass_gives_the_kernel_the_adds_operands() {
    check("compiled");
}

#[test]
fn a_fused_add_norm_kernel_with_a_wrong_sum_is_left_out_by_the_plug_check() {
    check("wrong_sum");
}
