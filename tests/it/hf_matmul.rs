//! The matmuls of Hugging Face models, from profile to plan: a tiny random-weight
//! `GPT2LMHeadModel` plans one matmul target per Conv1D call site (W as stored, the
//! contiguous layout, with its bias) and one for the LM head's `nn.Linear` (Wᵀ, the
//! b_transposed layout, no bias), each at the shape the model calls it with; verification
//! plugs the matmul starter into those Conv1D modules and the LM head by each target's
//! layout, params and shape, after checking it against the module's own forward, and leaves
//! a wrong kernel out through that check (`tests/python/matmul_plugs_check.py`).

use crate::util::{autokernel, python_check, tempdir};

#[test]
fn gpt2_plans_its_conv1d_matmuls_with_bias_and_the_lm_head_linear_without() {
    let (dir, _ws) = tempdir();
    let out = autokernel()
        .current_dir(dir.path())
        .args(["profile", "--json", "--device", "cpu", "--top", "0"])
        .args([
            "--input-shape",
            "1,16",
            "--model",
            "transformers:GPT2LMHeadModel",
        ])
        .args([
            "--model-kwargs",
            r#"{"n_embd":32,"n_layer":1,"n_head":2,"vocab_size":128,"n_positions":64}"#,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut matmuls: Vec<(String, String, serde_json::Value, serde_json::Value)> = v["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"] == "matmul")
        .map(|t| {
            (
                t["op"].as_str().unwrap().to_string(),
                t["layout"].as_str().unwrap().to_string(),
                t["params"].clone(),
                t["shapes"].clone(),
            )
        })
        .collect();
    matmuls.sort_by_key(|m| (m.0.clone(), m.3.to_string()));
    let bias = |b: bool| serde_json::json!({ "has_bias": b });
    let conv = |shape: serde_json::Value| {
        (
            "Conv1D".to_string(),
            "contiguous".to_string(),
            bias(true),
            shape,
        )
    };
    // c_attn (32 → 96), attention c_proj (32 → 32), c_fc (32 → 128), MLP c_proj (128 → 32)
    let mut want = vec![
        conv(serde_json::json!([[16, 96, 32]])),
        conv(serde_json::json!([[16, 32, 32]])),
        conv(serde_json::json!([[16, 128, 32]])),
        conv(serde_json::json!([[16, 32, 128]])),
        (
            "Linear".to_string(),
            "b_transposed".to_string(),
            bias(false),
            serde_json::json!([[16, 128, 32]]),
        ),
    ];
    want.sort_by_key(|m| (m.0.clone(), m.3.to_string()));
    assert_eq!(matmuls, want, "{}", v["targets"]);
}

#[test]
fn verification_plugs_the_matmul_starter_into_gpt2s_conv1d_and_its_lm_head() {
    python_check("matmul_plugs_check.py", "plugged");
}

#[test]
fn a_matmul_kernel_that_drops_the_bias_or_reads_w_transposed_is_left_out_by_the_plug_check() {
    python_check("matmul_plugs_check.py", "wrong");
}
