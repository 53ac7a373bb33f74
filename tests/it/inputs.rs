//! A model's inputs and weights: `--input NAME=DIMS[:DTYPE]`, `--inputs FILE.py:FUNC`,
//! `--pretrained DIR`, and Hugging Face transformers models with small random configs
//! (skipped, with a printed line, when transformers is not importable).

use std::path::Path;
use std::process::Command;

use crate::util::{autokernel, tempdir};

/// The Python the worker runs, as `autokernel()` picks it.
fn python() -> std::path::PathBuf {
    std::env::var_os("AUTOKERNEL_PYTHON")
        .map(Into::into)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"))
}

/// Whether transformers imports; prints why a test is skipped when it does not.
#[allow(clippy::print_stderr)] // says why it did not run
fn have_transformers(test: &str) -> bool {
    let ok = Command::new(python())
        .args(["-c", "import transformers"])
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipping {test}: transformers is not importable (pip install -r python/requirements-test.txt)");
    }
    ok
}

/// `autokernel profile --device cpu --iterations 1 --json ARGS… -o DIR/trace.json`: exit
/// code, the JSON (Null when it failed) and stderr.
fn profile(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let out = autokernel()
        .arg("profile")
        .args(args)
        .args(["--device", "cpu", "--iterations", "1", "--json", "-o"])
        .arg(dir.path().join("trace.json"))
        .output()
        .unwrap();
    let json = serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    (
        out.status.code(),
        json,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `calls` of each op named `op` in a profile's JSON, by its first shape.
fn calls_by_shape(json: &serde_json::Value, op: &str) -> Vec<(serde_json::Value, u64)> {
    let mut found: Vec<(serde_json::Value, u64)> = json["ops"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|o| o["op"] == op)
        .map(|o| (o["shapes"][0].clone(), o["calls"].as_u64().unwrap()))
        .collect();
    found.sort_by_key(|(s, _)| s.to_string());
    found
}

const GPT2_KWARGS: &str =
    r#"{"n_layer":2,"n_embd":64,"n_head":2,"vocab_size":512,"n_positions":128}"#;

/// GPT-2 as the README shows it. Its parameters, by hand: token embeddings 512·64 = 32768,
/// positions 128·64 = 8192, per layer two LayerNorms (2·128), c_attn 64·192+192, attention
/// c_proj 64·64+64, c_fc 64·256+256, MLP c_proj 256·64+64 (49984), the final LayerNorm 128,
/// the LM head tied to the embeddings: 141056. Per forward 5 LayerNorms at [1,32,64], each
/// on an add's sum (the first ln_1 on the embeddings' sum, through a dropout that returns it
/// as it is in eval mode; the others on residual sums): the op is planned as the fused
/// add_layernorm. Per layer 3 Conv1D at [1,32,64] (c_attn, attention c_proj, c_fc) and 1 at
/// [1,32,256].
#[test]
fn gpt2_with_small_kwargs_profiles_and_counts_its_calls() {
    if !have_transformers("gpt2_with_small_kwargs_profiles_and_counts_its_calls") {
        return;
    }
    let (code, json, err) = profile(&[
        "--model",
        "transformers:GPT2LMHeadModel",
        "--model-kwargs",
        GPT2_KWARGS,
        "--input-shape",
        "1,32",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(json["run"]["model_class"], "GPT2LMHeadModel");
    assert_eq!(json["run"]["parameters"], 141056);
    assert_eq!(json["run"]["input_kind"], "token_ids");
    assert_eq!(
        calls_by_shape(&json, "LayerNorm"),
        vec![(serde_json::json!([1, 32, 64]), 5)]
    );
    assert_eq!(
        calls_by_shape(&json, "Conv1D"),
        vec![
            (serde_json::json!([1, 32, 256]), 2),
            (serde_json::json!([1, 32, 64]), 6)
        ]
    );
}

/// T5 needs decoder inputs: the encoder runs at 16 tokens, the decoder at 8, and the
/// T5LayerNorm (d_model 32) shows both lengths.
#[test]
fn t5_profiles_with_encoder_and_decoder_inputs() {
    if !have_transformers("t5_profiles_with_encoder_and_decoder_inputs") {
        return;
    }
    let kwargs = r#"{"d_model":32,"d_kv":8,"d_ff":64,"num_layers":1,"num_decoder_layers":1,"num_heads":4,"vocab_size":256}"#;
    let (code, json, err) = profile(&[
        "--model",
        "transformers:T5ForConditionalGeneration",
        "--model-kwargs",
        kwargs,
        "--input",
        "input_ids=1,16",
        "--input",
        "decoder_input_ids=1,8",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        json["run"]["inputs"],
        "input_ids=1x16 token ids, decoder_input_ids=1x8 token ids"
    );
    let shapes: Vec<serde_json::Value> = calls_by_shape(&json, "T5LayerNorm")
        .into_iter()
        .map(|(s, _)| s)
        .collect();
    assert!(
        shapes.contains(&serde_json::json!([1, 16, 32]))
            && shapes.contains(&serde_json::json!([1, 8, 32])),
        "{shapes:?}"
    );
    // without decoder inputs the model refuses, and the error says so
    let (code, _, err) = profile(&[
        "--model",
        "transformers:T5ForConditionalGeneration",
        "--model-kwargs",
        kwargs,
        "--input",
        "input_ids=1,16",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("rejected its inputs (input_ids=1x16 token ids)"),
        "{err}"
    );
}

#[test]
fn a_config_key_typo_is_an_error_naming_the_field() {
    if !have_transformers("a_config_key_typo_is_an_error_naming_the_field") {
        return;
    }
    let (code, _, err) = profile(&[
        "--model",
        "transformers:GPT2LMHeadModel",
        "--model-kwargs",
        r#"{"n_layers":2}"#,
        "--input-shape",
        "1,32",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "--model-kwargs key `n_layers` is not a field of `GPT2Config`: did you mean n_layer?"
        ),
        "{err}"
    );
    // a keyword input forward does not take is named likewise
    let (code, _, err) = profile(&[
        "--model",
        "transformers:GPT2LMHeadModel",
        "--model-kwargs",
        GPT2_KWARGS,
        "--input",
        "input_id=1,32",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(
            "`GPT2LMHeadModel.forward` has no parameter `input_id`; did you mean input_ids?"
        ),
        "{err}"
    );
}

/// A checkpoint saved with `save_pretrained` loads with its own config: 1 layer, 32 wide,
/// 256 tokens, 64 positions has 256·32 + 64·32 + (2·64 + 32·96+96 + 32·32+32 + 32·128+128
/// + 128·32+32) + 64 = 23008 parameters, where the default config has 124 million.
#[test]
fn pretrained_loads_a_local_checkpoint() {
    if !have_transformers("pretrained_loads_a_local_checkpoint") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let ckpt = dir.path().join("ckpt");
    let save = format!(
        "import transformers as t\n\
         c = t.GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=256, n_positions=64)\n\
         t.GPT2LMHeadModel(c).save_pretrained({:?})\n",
        ckpt.to_str().unwrap()
    );
    let out = Command::new(python()).args(["-c", &save]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, json, err) = profile(&[
        "--model",
        "transformers:GPT2LMHeadModel",
        "--pretrained",
        ckpt.to_str().unwrap(),
        "--input-shape",
        "1,16",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(json["run"]["parameters"], 23008);
    // a folder that holds no checkpoint is the model's error, not a download
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, _, err) = profile(&[
        "--model",
        "transformers:GPT2LMHeadModel",
        "--pretrained",
        empty.to_str().unwrap(),
        "--input-shape",
        "1,16",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("constructing `GPT2LMHeadModel` from"), "{err}");
}

/// `--inputs FILE.py:FUNC`: a model taking an image and a keyword gets what the function
/// returns, with the device and dtype it asked for.
#[test]
fn an_inputs_function_builds_the_call() {
    let (_d, ws) = tempdir();
    std::fs::create_dir_all(&ws).unwrap();
    let model = ws.join("m.py");
    std::fs::write(
        &model,
        "import torch\n\
         class Net(torch.nn.Module):\n\
         \x20   def __init__(self):\n\
         \x20       super().__init__()\n\
         \x20       self.conv = torch.nn.Conv2d(3, 4, 3)\n\
         \x20   def forward(self, pixels, *, scale):\n\
         \x20       return self.conv(pixels) * scale\n",
    )
    .unwrap();
    let inputs = ws.join("inputs.py");
    std::fs::write(
        &inputs,
        "import torch\n\
         def make(model, device, dtype):\n\
         \x20   return (torch.randn(2, 3, 8, 8, device=device, dtype=dtype),), {'scale': 2.0}\n\
         def wrong(model):\n\
         \x20   return torch.zeros(1)\n",
    )
    .unwrap();
    let m = model.to_str().unwrap();
    let func = |f: &str| format!("{}:{f}", inputs.display());
    let (code, json, err) = profile(&["--model", m, "--class", "Net", "--inputs", &func("make")]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        json["run"]["inputs"],
        format!("{}:make -> 2x3x8x8 float32, scale=float", inputs.display())
    );
    let conv = json["ops"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["op"] == "Conv2d")
        .expect("a Conv2d op");
    assert_eq!(conv["shapes"][0], serde_json::json!([2, 3, 8, 8]));
    let (code, _, err) = profile(&["--model", m, "--class", "Net", "--inputs", &func("wrong")]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("it must return (args, kwargs)"), "{err}");
    let (code, _, err) = profile(&[
        "--model",
        m,
        "--class",
        "Net",
        "--inputs",
        &func("make"),
        "--input-shape",
        "1,3",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("cannot be used with"), "{err}");
}

/// Keyword inputs reach the verification as they reached the profiler: the model cannot
/// run without its `scale` input, so a verification that passes (in `run`, then again from
/// the recorded model with `verify`) called it with one; a resume with another input is
/// refused like one with another input shape.
#[test]
fn keyword_inputs_reach_verification_and_a_resume_with_others_is_refused() {
    let (dir, ws) = tempdir();
    let model = dir.path().join("m.py");
    std::fs::write(
        &model,
        "import torch\n\
         class Net(torch.nn.Module):\n\
         \x20   def __init__(self):\n\
         \x20       super().__init__()\n\
         \x20       self.norm = torch.nn.LayerNorm(64)\n\
         \x20   def forward(self, x, *, scale):\n\
         \x20       return self.norm(x) * scale\n",
    )
    .unwrap();
    let run = |scale: &str| {
        autokernel()
            .args(["run", "--model"])
            .arg(&model)
            .args([
                "--class",
                "Net",
                "--input-shape",
                "4,16,64",
                "--input",
                scale,
            ])
            .args(["--device", "cpu", "--agent", "tune", "--top", "1"])
            .args(["--max-experiments", "1", "--json", "--workspace"])
            .arg(&ws)
            .output()
            .unwrap()
    };
    let out = run("scale=1,1,64");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "run failed: {stderr}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["verification"]["state"], "passed", "{summary}");
    let verify: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ws.join("verify.json")).unwrap()).unwrap();
    assert_eq!(
        verify["included"],
        serde_json::json!(["01-layernorm"]),
        "{verify}"
    );
    let settings = std::fs::read_to_string(ws.join("autokernel.toml")).unwrap();
    assert!(settings.contains("\"scale=1,1,64\""), "{settings}");

    let out = run("scale=1,1,1");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("belongs to another model")
            && stderr.contains("input scale=1,1,64")
            && stderr.contains("input scale=1,1,1"),
        "{stderr}"
    );

    let out = autokernel()
        .args(["verify", "--json", "-w"])
        .arg(&ws)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
