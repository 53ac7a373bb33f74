//! Whole Hugging Face models through `autokernel run` on the CPU, one tiny random-weight
//! config per family of issue 19 (GPT-2's Conv1D and tanh-GELU, Llama's RMSNorm, gated MLP,
//! rotary and GQA, Qwen2's eps 1e-6, BERT's eps 1e-12 and non-causal attention, T5's
//! RMSNorm): every target the run plans has a call site a plug takes, so once each target
//! has its judged starter (`--target-budget 1s`: a baseline and one experiment each), the
//! verification plugs in every one of them (a plug that takes no call is left out as
//! unused, so each included target was called) and the model's output stays within
//! tolerance. Each family's norms fed by a residual add are planned and plugged in as a
//! fused chain (`add_rmsnorm`, `add_layernorm`). A mixture of experts (Mixtral) reports its router and grouped matmuls as
//! having no kind.

use crate::util::{autokernel, tempdir};

const GPT2: &str = r#"{"n_embd":32,"n_layer":1,"n_head":2,"vocab_size":128,"n_positions":64}"#;
const LLAMA: &str = r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256}"#;
const QWEN2: &str = r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256}"#;
const BERT: &str = r#"{"hidden_size":32,"intermediate_size":64,"num_hidden_layers":1,"num_attention_heads":2,"vocab_size":128}"#;
const MIXTRAL: &str = r#"{"hidden_size":64,"intermediate_size":128,"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":256,"num_local_experts":4,"num_experts_per_tok":2}"#;
const T5: &str =
    r#"{"d_model":32,"d_kv":8,"d_ff":64,"num_layers":1,"num_heads":4,"vocab_size":128}"#;

/// Runs `class` with `config` at 1×16 tokens, every planned target given its starter, and
/// asserts that the verification passed with every planned target plugged in; returns
/// the plan's kinds (sorted) for the caller's own expectations.
fn every_planned_target_is_plugged_in(class: &str, config: &str) -> Vec<String> {
    let (_dir, ws) = tempdir();
    let out = autokernel()
        .args(["run", "--model", &format!("transformers:{class}")])
        .args(["--model-kwargs", config, "--input-shape", "1,16"])
        .args([
            "--device",
            "cpu",
            "--top",
            "8",
            "--target-budget",
            "1s",
            "--json",
        ])
        .arg("-w")
        .arg(&ws)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{class}: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let plan: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("plan.json")).unwrap()).unwrap();
    let mut planned: Vec<String> = plan
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert!(!planned.is_empty(), "{class}: nothing planned");
    let result = &summary["verification"]["result"];
    assert_eq!(result["passed"], true, "{class}: {result:#}");
    let mut included: Vec<String> = result["included"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    planned.sort();
    included.sort();
    assert_eq!(
        included, planned,
        "{class}: left out {:#}\n{stderr}",
        summary["left_out"]
    );
    let mut kinds: Vec<String> = plan
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["kind"].as_str().unwrap().to_string())
        .collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

#[test]
fn gpt2_runs_with_every_planned_target_plugged_in() {
    let kinds = every_planned_target_is_plugged_in("GPT2LMHeadModel", GPT2);
    // Conv1D and the LM head are matmuls; every LayerNorm takes an add's sum (ln_1 the
    // embeddings', ln_2 and ln_f residual sums): a fused add_layernorm chain
    assert!(
        kinds.contains(&"matmul".into()) && kinds.contains(&"add_layernorm".into()),
        "{kinds:?}"
    );
}

#[test]
fn llama_runs_with_every_planned_target_plugged_in() {
    let kinds = every_planned_target_is_plugged_in("LlamaForCausalLM", LLAMA);
    // post_attention_layernorm and the final norm take a residual add's sum
    assert!(kinds.contains(&"add_rmsnorm".into()), "{kinds:?}");
}

#[test]
fn qwen2_runs_with_every_planned_target_plugged_in() {
    let kinds = every_planned_target_is_plugged_in("Qwen2ForCausalLM", QWEN2);
    assert!(kinds.contains(&"add_rmsnorm".into()), "{kinds:?}");
}

#[test]
fn bert_runs_with_every_planned_target_plugged_in() {
    let kinds = every_planned_target_is_plugged_in("BertModel", BERT);
    // BertSelfOutput and BertOutput: LayerNorm(hidden_states + input_tensor)
    assert!(kinds.contains(&"add_layernorm".into()), "{kinds:?}");
}

#[test]
fn t5_encoder_runs_with_every_planned_target_plugged_in() {
    let kinds = every_planned_target_is_plugged_in("T5EncoderModel", T5);
    // T5LayerNorm is an RMSNorm, never planned as a layer norm; the feed-forward's and the
    // final norm take a residual add's sum
    assert!(
        kinds.contains(&"add_rmsnorm".into()) && !kinds.iter().any(|k| k.ends_with("layernorm")),
        "{kinds:?}"
    );
}

/// A tiny Mixtral (a mixture of experts): its router module and its experts' grouped
/// matmuls are reported with no kind, never planned as the softmax and the matmuls they
/// run inside (the router was planned as a softmax over the hidden size, `_grouped_mm` as a
/// matmul of unknown shape).
#[test]
fn mixtrals_router_and_grouped_matmuls_are_reported_not_planned() {
    let (dir, _ws) = tempdir();
    let profile = |json: &[&str]| {
        autokernel()
            .current_dir(dir.path())
            .args(["profile", "--model", "transformers:MixtralForCausalLM"])
            .args(["--model-kwargs", MIXTRAL, "--input-shape", "1,16"])
            .args(["--device", "cpu", "--top", "0"])
            .args(json)
            .output()
            .unwrap()
    };
    let out = profile(&[]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("not planned, no kind:"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        line.contains("MixtralTopKRouter") && line.contains("aten::_grouped_mm"),
        "{line}"
    );
    let json = profile(&["--json"]);
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let no_kind: Vec<&str> = v["no_kind"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["op"].as_str().unwrap())
        .collect();
    assert!(
        no_kind.contains(&"MixtralTopKRouter") && no_kind.contains(&"aten::_grouped_mm"),
        "{no_kind:?}"
    );
    for t in v["targets"].as_array().unwrap() {
        assert!(
            t["op"] != "MixtralTopKRouter" && t["op"] != "aten::_grouped_mm",
            "planned: {t}"
        );
        // the only softmax of the model is the router's: none is planned
        assert_ne!(t["kind"], "softmax", "planned: {t}");
    }
}
