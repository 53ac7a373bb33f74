//! Fused chains, a residual add into a norm (`add_rmsnorm`, `add_layernorm`), from the plug's
//! side (`tests/python/chain_plugs_check.py`): verification plugs the starters into tiny
//! random-weight HF Llama, GPT-2 and BERT; the held-back add gives the model's own result
//! whatever its code does between the add and the norm; under torch.compile the graph pass
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
fn a_held_back_add_is_computed_before_any_other_read_and_a_taken_sum_is_the_models_residual() {
    check("held_back");
}

#[test]
fn under_torch_compile_the_graph_pass_gives_the_kernel_the_adds_operands() {
    check("compiled");
}

#[test]
fn a_fused_add_norm_kernel_with_a_wrong_sum_is_left_out_by_the_plug_check() {
    check("wrong_sum");
}
