//! Rotary embeddings, from profile to plug: a tiny random-weight `LlamaForCausalLM`
//! (transformers' module-level `apply_rotary_pos_emb`: Q and K together, HF's half-split
//! `rotate_half` pairing, K with fewer heads) and the bundled `tiny` example (its own
//! `RotaryEmbedding` module, interleaved pairs, one tensor a call) plan rotary_embedding at
//! the pairing their own code computes, only at those call sites; verification plugs the
//! rotary starter in after checking it against the model's own function or module, and
//! leaves a kernel with the wrong pairing out (`tests/python/rotary_plugs_check.py`).

use crate::util::{autokernel, python_check, tempdir};

/// `autokernel profile --json` of `model` (`--model …` or `--example …` arguments) on the
/// CPU: the planned targets and the recorded call sites.
fn profiled(model: &[&str]) -> (Vec<serde_json::Value>, Vec<serde_json::Value>) {
    let (dir, _ws) = tempdir();
    let out = autokernel()
        .current_dir(dir.path())
        .args(["profile", "--json", "--device", "cpu", "--top", "0"])
        .args(model)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let sites = v["run"]["call_sites"].as_array().unwrap().clone();
    (v["targets"].as_array().unwrap().clone(), sites)
}

/// The `(shapes, params)` of each rotary_embedding target of `targets`.
fn rotary_targets(targets: &[serde_json::Value]) -> Vec<(serde_json::Value, serde_json::Value)> {
    targets
        .iter()
        .filter(|t| t["kind"] == "rotary_embedding")
        .map(|t| (t["shapes"].clone(), t["params"].clone()))
        .collect()
}

const LLAMA: &str = r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256}"#;

#[test]
fn hf_llama_plans_rotary_at_apply_rotary_pos_emb_with_the_half_split_pairing() {
    let (targets, sites) = profiled(&[
        "--model",
        "transformers:LlamaForCausalLM",
        "--model-kwargs",
        LLAMA,
        "--input-shape",
        "1,16",
    ]);
    let half = serde_json::json!({ "pairing": "half_split" });
    // Q: 4 heads; K: 2 K/V heads; 16 tokens of head_dim 16
    assert_eq!(
        rotary_targets(&targets),
        [
            (serde_json::json!([[1, 4, 16, 16]]), half.clone()),
            (serde_json::json!([[1, 2, 16, 16]]), half)
        ],
        "{targets:#?}"
    );
    // the rotary embedding module computes the tables: a site, not planned, with the reason
    let tables: Vec<&serde_json::Value> = sites
        .iter()
        .filter(|s| s["module"] == "LlamaRotaryEmbedding")
        .collect();
    assert_eq!(tables.len(), 1, "{sites:#?}");
    assert!(tables[0]["params"].is_null());
    let reason = tables[0]["reason"].as_str().unwrap();
    assert!(reason.contains("not x rotated"), "{reason}");
}

#[test]
fn the_bundled_tiny_example_plans_its_rotary_module_with_the_interleaved_pairing() {
    let (targets, _sites) = profiled(&["--example", "tiny"]);
    // 2 heads of 32, 32 tokens
    assert_eq!(
        rotary_targets(&targets),
        [(
            serde_json::json!([[1, 2, 32, 32]]),
            serde_json::json!({ "pairing": "interleaved" })
        )],
        "{targets:#?}"
    );
}

#[test]
fn verification_plugs_the_rotary_starter_into_hf_llama_and_the_tiny_example_by_their_pairing() {
    python_check("rotary_plugs_check.py", "plugged");
}

#[test]
fn a_rotary_kernel_with_the_wrong_pairing_is_left_out_by_the_plug_check() {
    python_check("rotary_plugs_check.py", "wrong_pairing");
}

#[test]
fn a_rotary_target_whose_pairing_no_call_site_computes_takes_no_call() {
    python_check("rotary_plugs_check.py", "unplanned_pairing");
}

#[test]
fn optimize_installs_rotary_plugs_on_one_model_instance_and_undoes_them() {
    python_check("rotary_plugs_check.py", "deployed");
}
