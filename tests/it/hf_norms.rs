//! The norms of Hugging Face models, from profile to plug: tiny random-weight configs of
//! `LlamaForCausalLM` (LlamaRMSNorm, eps 1e-5, llama cast order), `BertModel` (LayerNorm,
//! eps 1e-12) and `T5EncoderModel` (T5LayerNorm, an RMS norm, t5 cast order) are planned
//! with the params the model computes, and verification plugs the starters in by those
//! params and leaves a kernel with a wrong eps out through the plug check
//! (`tests/python/norm_plugs_check.py`).

use crate::util::{autokernel, python_check, tempdir};

/// `autokernel profile --json` of `transformers:<class>` with `config` on 1×16 token ids:
/// the planned targets.
fn planned(class: &str, config: &str) -> Vec<serde_json::Value> {
    let (dir, _ws) = tempdir();
    let out = autokernel()
        .current_dir(dir.path())
        .args([
            "profile",
            "--json",
            "--device",
            "cpu",
            "--top",
            "8",
            "--input-shape",
            "1,16",
        ])
        .arg("--model")
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

/// The one target of norm `kind` in `targets`, planned as the norm or as its fused chain
/// with a residual add (`add_<kind>`, which carries the norm's params): its shapes and
/// params.
fn norm_target(targets: &[serde_json::Value], kind: &str) -> serde_json::Value {
    let fused = format!("add_{kind}");
    let norms: Vec<&serde_json::Value> = targets
        .iter()
        .filter(|t| t["kind"] == kind || t["kind"] == fused.as_str())
        .collect();
    assert_eq!(norms.len(), 1, "{targets:?}");
    norms[0].clone()
}

#[test]
fn hf_norms_are_planned_with_the_params_their_models_compute() {
    let llama = planned(
        "LlamaForCausalLM",
        r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"rms_norm_eps":1e-5}"#,
    );
    let t = norm_target(&llama, "rmsnorm");
    assert_eq!(t["shapes"], serde_json::json!([[16, 64]]), "{t}");
    assert_eq!(
        t["params"],
        serde_json::json!({"eps": 1e-5, "weight_offset": 0, "cast_order": "llama"})
    );
    let bert = planned(
        "BertModel",
        r#"{"hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":128}"#,
    );
    let t = norm_target(&bert, "layernorm");
    assert_eq!(
        t["params"],
        serde_json::json!({"eps": 1e-12, "has_bias": true})
    );
    // T5LayerNorm: named a layer norm, an RMS norm by its forward; planned as rmsnorm only
    let t5 = planned(
        "T5EncoderModel",
        r#"{"d_model":32,"d_kv":8,"d_ff":64,"num_layers":1,"num_heads":4,"vocab_size":128,"layer_norm_epsilon":1e-6}"#,
    );
    assert!(
        t5.iter()
            .all(|t| !t["kind"].as_str().unwrap().ends_with("layernorm")),
        "{t5:?}"
    );
    let t = norm_target(&t5, "rmsnorm");
    assert_eq!(t["shapes"], serde_json::json!([[16, 32]]), "{t}");
    assert_eq!(
        t["params"],
        serde_json::json!({"eps": 1e-6, "weight_offset": 0, "cast_order": "t5"})
    );
}

/// Runs one check of `norm_plugs_check.py`.
fn check(name: &str) {
    python_check("norm_plugs_check.py", name);
}

#[test]
fn verification_plugs_the_norm_starters_into_llama_bert_and_t5_by_their_params() {
    check("plugged");
}

#[test]
fn a_norm_kernel_with_a_wrong_eps_is_left_out_by_the_plug_check() {
    check("wrong_eps");
}

/// The judge's constant-row inputs scale with the target's eps: at BERT's 1e-12 a layernorm
/// whose mean carries one float32 rounding still lands within the float32 tolerance (rows
/// of a constant ~1e-2 magnified it past the tolerance, and BERT's layernorm starter failed
/// its baseline on the CPU).
#[test]
fn constant_rows_at_a_tiny_eps_leave_a_correct_kernels_rounding_within_tolerance() {
    check("constant_rows");
}
