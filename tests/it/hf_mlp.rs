//! Gated MLPs of Hugging Face models, from profile to plug: a tiny random-weight
//! `LlamaForCausalLM` (LlamaMLP: SwiGLU, the SiLU applied through a module) and
//! `GemmaForCausalLM` (GemmaMLP: GeGLU with the tanh GELU) plan their MLP as one fused_mlp
//! target with the activation its forward computes, instead of three matmuls, and
//! verification plugs the fused_mlp starter in by that activation after checking it against
//! the module's own forward, leaving a kernel with the wrong activation out
//! (`tests/python/mlp_plugs_check.py`).

use crate::util::{autokernel, python_check, tempdir};

/// `autokernel profile --json --top 0` of `transformers:<class>` with `config` on 1×16
/// token ids: the planned targets.
fn planned(class: &str, config: &str) -> Vec<serde_json::Value> {
    let (dir, _ws) = tempdir();
    let out = autokernel()
        .current_dir(dir.path())
        .args(["profile", "--json", "--device", "cpu", "--top", "0"])
        .args(["--input-shape", "1,16", "--model"])
        .arg(format!("transformers:{class}"))
        .args(["--model-kwargs", config])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v["targets"].as_array().unwrap().clone()
}

/// The one fused_mlp target of `targets`, after checking that no matmul target is at the
/// MLP's projection shapes: gate/up [16, 128, 64], down [16, 64, 128].
fn mlp_target(targets: &[serde_json::Value]) -> serde_json::Value {
    let mlps: Vec<&serde_json::Value> = targets
        .iter()
        .filter(|t| t["kind"] == "fused_mlp")
        .collect();
    assert_eq!(mlps.len(), 1, "{targets:?}");
    for t in targets.iter().filter(|t| t["kind"] == "matmul") {
        for projection in [[16, 128, 64], [16, 64, 128]] {
            assert_ne!(t["shapes"], serde_json::json!([projection]), "{targets:?}");
        }
    }
    mlps[0].clone()
}

const LLAMA: &str = r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256}"#;
const GEMMA: &str = r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"vocab_size":256}"#;

#[test]
fn hf_gated_mlps_are_planned_as_fused_mlp_with_the_activation_their_forward_computes() {
    for (class, config, activation) in [
        ("LlamaForCausalLM", LLAMA, "silu"),
        ("GemmaForCausalLM", GEMMA, "gelu_tanh"),
    ] {
        let t = mlp_target(&planned(class, config));
        // tokens 16, hidden 64, intermediate 128
        assert_eq!(
            t["shapes"],
            serde_json::json!([[16, 64, 128]]),
            "{class}: {t}"
        );
        assert_eq!(
            t["params"],
            serde_json::json!({ "activation": activation }),
            "{class}"
        );
    }
}

#[test]
fn verification_plugs_the_fused_mlp_starter_into_llama_and_gemma_by_their_activation() {
    python_check("mlp_plugs_check.py", "plugged");
}

#[test]
fn a_fused_mlp_kernel_with_the_wrong_activation_is_left_out_by_the_plug_check() {
    python_check("mlp_plugs_check.py", "wrong_activation");
}
