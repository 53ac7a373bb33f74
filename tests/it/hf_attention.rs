//! Attention of Hugging Face models, from profile to plug: tiny random-weight configs of
//! `LlamaForCausalLM` (grouped-query: 4 query heads over 2 K/V heads, causal) and
//! `BertModel` (not causal; a padded batch gives a key-padding mask) are planned with the
//! params their attention calls have, and verification plugs a flash_attention kernel in
//! by those params and leaves a kernel with a wrong scale out through the plug check
//! (`tests/python/attention_plugs_check.py`).

use std::path::Path;

use crate::util::{autokernel, python_check, tempdir};

/// `autokernel profile --json` of `transformers:<class>` with `config` and the input
/// arguments `inputs`: the planned targets and the "not planned" call sites.
fn planned(class: &str, config: &str, inputs: &[&str]) -> Vec<serde_json::Value> {
    let (dir, _ws) = tempdir();
    let out = autokernel()
        .current_dir(dir.path())
        .args(["profile", "--json", "--device", "cpu", "--top", "8"])
        .args(inputs)
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

/// The one flash_attention target of `targets`.
fn attention(targets: &[serde_json::Value]) -> serde_json::Value {
    let found: Vec<&serde_json::Value> = targets
        .iter()
        .filter(|t| t["kind"] == "flash_attention")
        .collect();
    assert_eq!(found.len(), 1, "{targets:?}");
    found[0].clone()
}

const LLAMA: &str = r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256}"#;
const BERT: &str = r#"{"hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":128}"#;

#[test]
fn hf_attention_is_planned_with_the_params_its_calls_have() {
    // head_dim 64/4 = 16: transformers passes scale=1/4, the default, so it stays unset
    let t = attention(&planned(
        "LlamaForCausalLM",
        LLAMA,
        &["--input-shape", "1,16"],
    ));
    assert_eq!(t["shapes"], serde_json::json!([[1, 4, 16, 16]]), "{t}");
    assert_eq!(
        t["params"],
        serde_json::json!({"causal": true, "scale": null, "kv_heads": 2, "has_mask": false})
    );
    // BERT given an all-ones attention_mask: transformers drops a mask that masks nothing
    let t = attention(&planned(
        "BertModel",
        BERT,
        &[
            "--input",
            "input_ids=1,16",
            "--input",
            "attention_mask=1,16",
        ],
    ));
    assert_eq!(t["shapes"], serde_json::json!([[1, 2, 16, 16]]), "{t}");
    assert_eq!(
        t["params"],
        serde_json::json!({"causal": false, "scale": null, "kv_heads": null, "has_mask": false})
    );
    // a padded batch (the second sequence padded after 12 tokens): a key-padding mask
    let padded = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/padded_inputs.py:bert");
    let t = attention(&planned(
        "BertModel",
        BERT,
        &["--inputs", padded.to_str().unwrap()],
    ));
    assert_eq!(t["shapes"], serde_json::json!([[2, 2, 16, 16]]), "{t}");
    assert_eq!(
        t["params"],
        serde_json::json!({"causal": false, "scale": null, "kv_heads": null, "has_mask": true})
    );
}

#[test]
fn a_causal_model_with_a_padded_batch_plans_no_attention_and_says_why() {
    let (dir, _ws) = tempdir();
    let padded = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/python/padded_inputs.py:bert");
    let out = autokernel()
        .current_dir(dir.path())
        .args(["profile", "--device", "cpu", "--top", "8", "--inputs"])
        .arg(padded)
        .args([
            "--model",
            "transformers:LlamaForCausalLM",
            "--model-kwargs",
            LLAMA,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!stdout.contains("-flash_attention"), "{stdout}");
    assert!(
        stdout.contains(
            "LlamaAttention (flash_attention [2,4,16,16] float32, 1 module, 1 call): a padding mask combined with causal masking"
        ),
        "{stdout}"
    );
}

/// Runs one check of `attention_plugs_check.py`.
fn check(name: &str) {
    python_check("attention_plugs_check.py", name);
}

#[test]
fn verification_plugs_an_attention_kernel_into_llama_and_bert_by_their_params() {
    check("plugged");
}

#[test]
fn an_attention_kernel_with_a_wrong_scale_is_left_out_by_the_plug_check() {
    check("wrong_scale");
}

/// Under torch.compile, HF Llama's attention takes the kernel: no graph break, the
/// operator in the traced graph (transformers would otherwise hand it a materialized mask).
#[test]
fn an_exported_attention_kernel_is_in_hf_llamas_compiled_graph() {
    check("compiled");
}
