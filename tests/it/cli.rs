//! Errors a user can cause get a clear message and exit 2; `--help` teaches.

use crate::util::{autokernel, new_kernel, report, tempdir};

/// A model file whose `Net` has no forward.
const NET_WITHOUT_FORWARD: &str = "import torch\nclass Net(torch.nn.Module):\n    pass\n";
/// A model file whose `Net` returns its input.
const IDENTITY_NET: &str =
    "import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x\n";

/// Writes `source` to `m.py` in a fresh folder (kept alive by the returned guard).
fn model_file(source: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("m.py");
    std::fs::write(&model, source).unwrap();
    (dir, model)
}

fn stderr_of(args: &[&str]) -> (Option<i32>, String) {
    let out = autokernel().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn unknown_example_exits_2_and_lists_the_examples() {
    let (_d, ws) = tempdir();
    let (code, err) = stderr_of(&[
        "run",
        "--example",
        "gpt5",
        "--device",
        "cpu",
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("unknown example `gpt5`") && err.contains("tiny, gpt2, llama, bert"),
        "{err}"
    );
}

#[test]
fn missing_model_file_and_missing_class_exit_2() {
    let (_d, ws) = tempdir();
    let w = ws.to_str().unwrap();
    let (code, err) = stderr_of(&[
        "run",
        "--model",
        "/no/such/model.py",
        "--class",
        "Net",
        "--workspace",
        w,
    ]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("model file `/no/such/model.py` not found"),
        "{err}"
    );
    let (_dir, model) = model_file(NET_WITHOUT_FORWARD);
    let (code, err) = stderr_of(&["run", "--model", model.to_str().unwrap(), "--workspace", w]);
    assert_eq!(code, Some(2));
    assert!(err.contains("needs `--class NAME`"), "{err}");
}

#[test]
fn a_class_that_is_not_in_the_file_exits_2_naming_it() {
    let (_d, ws) = tempdir();
    let (_dir, model) = model_file(IDENTITY_NET);
    let (code, err) = stderr_of(&[
        "run",
        "--model",
        model.to_str().unwrap(),
        "--class",
        "Missing",
        "--device",
        "cpu",
        "--input-shape",
        "2,8",
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("Missing"), "{err}");
}

#[test]
fn run_help_teaches_with_examples_and_headings() {
    let out = autokernel().args(["run", "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for needle in [
        "Examples:",
        "--example",
        "--agent",
        "--budget",
        "--max-experiments",
        "--workspace",
        "Agent:",
        "Budget:",
        "Model:",
        "OPENAI_BASE_URL",
    ] {
        assert!(
            help.contains(needle),
            "run --help lacks `{needle}`:\n{help}"
        );
    }
    let out = autokernel().arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("Exit codes:"), "{help}");
}

#[test]
fn report_on_a_folder_that_is_not_a_workspace_exits_2_with_a_hint() {
    let (_d, ws) = tempdir();
    let (code, err) = stderr_of(&["report", "--workspace", ws.to_str().unwrap()]);
    assert_eq!(code, Some(2));
    assert!(
        err.contains("is not an autokernel workspace") && err.contains("hint:"),
        "{err}"
    );
}

#[test]
fn a_refused_flag_leaves_no_workspace_folder() {
    let (_d, ws) = tempdir();
    let (code, err) = stderr_of(&[
        "run",
        "--example",
        "tiny",
        "--input-shape",
        "0,2",
        "--workspace",
        ws.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--input-shape `0,2`"), "{err}");
    assert!(!ws.exists(), "the refused command created {}", ws.display());
}

#[test]
fn a_run_that_failed_to_load_its_model_does_not_lock_the_workspace_to_it() {
    let (_d, ws) = tempdir();
    let w = ws.to_str().unwrap();
    let (_dir, model) = model_file(IDENTITY_NET);
    let m = model.to_str().unwrap();
    let (code, err) = stderr_of(&[
        "run",
        "--model",
        m,
        "--class",
        "Nope",
        "--device",
        "cpu",
        "--input-shape",
        "2,8",
        "--workspace",
        w,
    ]);
    assert_eq!(code, Some(2), "{err}");
    // the folder this run created is gone again: no repository, log or program.md left
    assert!(!ws.exists(), "a failed first run left {}", ws.display());
    // the same workspace with another model is not refused as "another model's"
    let (code, err) = stderr_of(&[
        "run",
        "--example",
        "tiny",
        "--device",
        "cpu",
        "--top",
        "0",
        "--workspace",
        w,
    ]);
    assert_eq!(code, Some(2));
    assert!(!err.contains("belongs to another model"), "{err}");
    assert!(err.contains("--top 0"), "{err}");
}

#[test]
fn bench_judges_every_file_at_every_shape_on_one_worker_and_fails_if_any_fails() {
    let (keep, _) = tempdir();
    let dir = keep.path();
    let good = dir.join("good.py");
    new_kernel("rmsnorm", &good);
    // the same starter with its answer replaced by zeros: passes load, fails smoke
    let source = std::fs::read_to_string(&good).unwrap();
    let zeros = source.replace("    return y\n", "    return torch.zeros_like(y)\n");
    assert_ne!(zeros, source, "the starter ends kernel_fn with `return y`");
    let bad = dir.join("bad.py");
    std::fs::write(&bad, zeros).unwrap();
    let out = autokernel()
        .arg("bench")
        .args([&good, &bad])
        .args(["--shape", "8,64", "--shape", "5,33", "--dtype", "float32"])
        .args(["--device", "cpu", "--quick", "--json"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 4, "{stdout}");
    let seen: Vec<(String, String)> = lines
        .iter()
        .map(|v| {
            let path = v["path"].as_str().unwrap().to_string();
            let file = path.rsplit('/').next().unwrap().to_string();
            (file, v["correctness"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("good.py".to_string(), "PASS".to_string()),
            ("good.py".to_string(), "PASS".to_string()),
            ("bad.py".to_string(), "FAIL".to_string()),
            ("bad.py".to_string(), "FAIL".to_string()),
        ]
    );
    // each passing evaluation was timed at its own --shape
    assert_eq!(lines[0]["shape"], "8x64");
    assert_eq!(lines[1]["shape"], "5x33");
    assert_eq!(lines[0]["dtype"], "float32");
    assert!(lines
        .iter()
        .all(|v| v["turnaround_s"].as_f64().unwrap() > 0.0));
}

#[test]
fn importing_a_trace_without_events_is_an_error_with_a_hint() {
    let (keep, _) = tempdir();
    let trace = keep.path().join("empty.json");
    std::fs::write(&trace, r#"{"traceEvents": []}"#).unwrap();
    let out = autokernel()
        .args(["profile", "--import"])
        .arg(&trace)
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("holds no operator or kernel events"), "{err}");
    assert!(err.contains("ProfilerActivity.CUDA"), "{err}");
}

#[test]
fn a_kernel_that_kills_the_worker_before_naming_its_kind_is_a_crash_verdict() {
    let (keep, _) = tempdir();
    let path = keep.path().join("exits.py");
    // no literal KERNEL_KIND: the kind is computed, and the import never gets that far
    std::fs::write(
        &path,
        "import os\nos._exit(3)\nKERNEL_KIND = 'soft' + 'max'\ndef kernel_fn(x):\n    return x\n",
    )
    .unwrap();
    let out = autokernel()
        .arg("bench")
        .arg(&path)
        .args(["--device", "cpu", "--quick", "--json"])
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(v["correctness"], "CRASH");
    assert!(v["kind"].is_null());
    let reason = v["reason"].as_str().unwrap();
    assert!(reason.contains("exit status 3"), "{reason}");
}

/// `bench` on each kernel of `autokernel-bench/tests/cases/verdicts/` (issue 21, point 6),
/// then the softmax starter, in one call: each trick is a verdict other than PASS, the
/// starter passes, and the exit status is 1 (a verdict), never 2. Several made it exit 2.
#[test]
fn bench_gives_a_verdict_for_every_trick_and_exits_1() {
    let (keep, _) = tempdir();
    let cases = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("autokernel-bench/tests/cases/verdicts");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&cases).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "py") {
            // one case deletes its own file: judge copies
            let to = keep.path().join(p.file_name().unwrap());
            std::fs::copy(&p, &to).unwrap();
            files.push(to);
        }
    }
    assert_eq!(files.len(), 12, "{files:?}");
    let honest = keep.path().join("honest.py");
    new_kernel("softmax", &honest);
    for f in &files {
        let out = autokernel()
            .arg("bench")
            .args([f, &honest])
            .args(["--device", "cpu", "--quick", "--json"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        let all = format!(
            "{}: {stdout}{}",
            f.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(out.status.code(), Some(1), "{all}");
        let lines = json_lines(&stdout);
        assert_eq!(lines.len(), 2, "{all}");
        assert!(
            ["FAIL", "TAMPER"].contains(&lines[0]["correctness"].as_str().unwrap()),
            "{all}"
        );
        assert!(!lines[0]["reason"].as_str().unwrap().is_empty(), "{all}");
        assert_eq!(lines[1]["correctness"], "PASS", "{all}");
    }
}

/// A TAMPER names the stage that caught it in `bench --json`'s `failed_stage`, as the
/// table's `failed_stage:` line and its stage rows do: a kernel that writes its answer
/// into its input is caught in smoke, one that patches `torch.equal` when imported at load.
/// `failed_stage` was null for every TAMPER.
#[test]
fn a_tamper_verdict_names_its_stage_in_json_and_table_alike() {
    let (keep, _) = tempdir();
    let header = "import torch\nKERNEL_KIND = \"softmax\"\nCONFIG = {}\nTUNABLES = {}\n";
    let writes_input = keep.path().join("writes_input.py");
    std::fs::write(
        &writes_input,
        format!("{header}def kernel_fn(x):\n    e = torch.exp(x.float() - x.float().amax(-1, keepdim=True))\n    x.copy_(e / e.sum(-1, keepdim=True))\n    return x.clone()\n"),
    )
    .unwrap();
    let patches = keep.path().join("patches_equal.py");
    std::fs::write(
        &patches,
        format!("{header}torch.equal = lambda a, b: True\ndef kernel_fn(x):\n    return torch.zeros_like(x)\n"),
    )
    .unwrap();
    let bench = |json: bool| {
        let mut cmd = autokernel();
        cmd.arg("bench")
            .args([&writes_input, &patches])
            .args(["--device", "cpu", "--quick"]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    };
    let lines = json_lines(&bench(true));
    let got: Vec<(&str, &str)> = lines
        .iter()
        .map(|v| {
            (
                v["correctness"].as_str().unwrap(),
                v["failed_stage"].as_str().unwrap_or("null"),
            )
        })
        .collect();
    assert_eq!(got, [("TAMPER", "smoke"), ("TAMPER", "load")], "{lines:?}");
    for v in &lines {
        // the stage named is the one whose row failed
        let failed: Vec<&str> = v["stages"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["passed"] == false)
            .map(|s| s["stage"].as_str().unwrap())
            .collect();
        assert_eq!(failed, [v["failed_stage"].as_str().unwrap()], "{v}");
    }
    let table = bench(false);
    let stages: Vec<&str> = table
        .lines()
        .filter_map(|l| l.strip_prefix("failed_stage: "))
        .collect();
    assert_eq!(stages, ["smoke", "load"], "{table}");
    assert!(table.contains("\nload         FAIL"), "{table}");
}

#[test]
fn model_errors_name_the_file_and_line_in_the_users_code() {
    let profile = |source: &str| {
        let (_dir, path) = model_file(source);
        let m = path.to_str().unwrap().to_string();
        let (code, err) = stderr_of(&[
            "profile",
            "--model",
            &m,
            "--class",
            "Net",
            "--device",
            "cpu",
            "--input-shape",
            "2,8",
        ]);
        (code, err, m)
    };
    let (code, err, m) = profile("import torch\nclass Net(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n        raise ValueError('bad config')\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("ValueError: bad config"), "{err}");
    assert!(err.contains(&format!("(at {m}:5)")), "{err}");
    let (code, err, m) = profile("import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x.view(3, 7)\n");
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("rejected its inputs (2x8 float32)"), "{err}");
    assert!(err.contains(&format!("(at {m}:4)")), "{err}");
}

#[test]
fn bench_layout_b_transposed_hands_the_kernel_a_transposed_b() {
    let (keep, _) = tempdir();
    let path = keep.path().join("mm.py");
    new_kernel("matmul", &path);
    // a kernel that insists on nn.Linear's layout: B[k, n] at k + n*K
    let source = std::fs::read_to_string(&path).unwrap().replace(
        "    M, K = A.shape\n",
        "    M, K = A.shape\n    assert B.stride(0) == 1 and not B.is_contiguous(), f\"B strides {B.stride()}\"\n",
    );
    assert!(
        source.contains("B strides"),
        "the starter's kernel_fn starts with `M, K = A.shape`"
    );
    std::fs::write(&path, source).unwrap();
    let bench = |layout: &str| {
        autokernel()
            .arg("bench")
            .arg(&path)
            .args([
                "--device", "cpu", "--quick", "--shape", "32,24,16", "--dtype", "float32",
            ])
            .args(["--layout", layout, "--json"])
            .output()
            .expect("runs")
    };
    let transposed = bench("b_transposed");
    let text = String::from_utf8_lossy(&transposed.stdout);
    assert_eq!(transposed.status.code(), Some(0), "{text}");
    let contiguous = bench("contiguous");
    let text = String::from_utf8_lossy(&contiguous.stdout);
    assert_eq!(contiguous.status.code(), Some(1), "{text}");
    assert!(text.contains("B strides"), "{text}");
}

#[test]
fn an_llm_agent_works_on_a_fresh_workspace_with_the_built_in_program_md() {
    let (_keep, ws) = tempdir();
    // nothing listens on port 9: the proposal is an invalid row, not a setup error
    let out = autokernel()
        .args(["run", "--example", "tiny", "--agent", "openai"])
        .args([
            "--llm-base-url",
            "http://127.0.0.1:9/v1",
            "--llm-model",
            "m",
        ])
        .args(["--max-experiments", "1", "--device", "cpu", "--no-verify"])
        .arg("--workspace")
        .arg(&ws)
        .env_remove("AUTOKERNEL_PROGRAM_MD")
        .output()
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("instruction book"), "{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    let program = std::fs::read_to_string(ws.join("program.md")).expect("program.md written");
    assert!(program.len() > 500, "the built-in playbook");
    let rows = crate::util::rows(&ws);
    let llm = rows
        .iter()
        .find(|r| r["agent"] == "openai:m")
        .expect("an LLM row");
    assert_eq!(llm["decision"], "invalid");
    assert!(llm["description"].contains("cannot reach"), "{llm:?}");
}

#[test]
fn zero_budgets_and_limits_are_refused_before_any_work() {
    for (flag, value, says) in [
        ("--max-experiments", "0", "--max-experiments 0"),
        ("--budget", "0s", "--budget 0"),
        ("--target-budget", "0s", "--target-budget 0"),
        ("--plateau", "0", "--plateau 0"),
    ] {
        let (_d, ws) = tempdir();
        let w = ws.to_str().unwrap();
        let (code, err) = stderr_of(&["run", "--example", "tiny", flag, value, "--workspace", w]);
        assert_eq!(code, Some(2), "{flag}: {err}");
        assert!(err.contains(says), "{err}");
        assert!(!ws.exists(), "the refused command created {}", ws.display());
    }
    let (code, err) = stderr_of(&["bench", "k.py", "--timeout", "0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--timeout 0"), "{err}");
    let (keep, _) = tempdir();
    let (code, err) = stderr_of(&["bench", keep.path().to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is a folder"), "{err}");
}

#[test]
fn bench_dtype_alone_judges_and_times_in_that_dtype() {
    let (keep, _) = tempdir();
    let path = keep.path().join("softmax.py");
    new_kernel("softmax", &path);
    let out = autokernel()
        .arg("bench")
        .arg(&path)
        .args(["--dtype", "float16", "--device", "cpu", "--quick", "--json"])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["dtype"], "float16", "{text}");
    // every stage ran in float16 only: one smoke case
    let smoke = v["stages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["stage"] == "smoke")
        .unwrap();
    assert_eq!(smoke["cases"], 1, "{text}");
}

/// A class that is not an nn.Module gets a sentence, not Python's traceback about a missing
/// `.to`; a file given as `FILE.py:Class` gets the syntax that loads it.
#[test]
fn a_model_that_is_not_an_nn_module_or_a_file_as_a_module_path_is_explained() {
    let (keep, _) = tempdir();
    let trace = keep.path().join("trace.json");
    let trace = trace.to_str().unwrap();
    let (code, err) = stderr_of(&[
        "profile",
        "--model",
        "collections:OrderedDict",
        "--device",
        "cpu",
        "--input-shape",
        "2,8",
        "-o",
        trace,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("`OrderedDict` in module `collections` is `collections.OrderedDict`, not a torch.nn.Module subclass"),
        "{err}"
    );
    assert!(
        !err.contains("Traceback") && !err.contains("attribute 'to'"),
        "{err}"
    );
    let (_dir, model) = model_file(IDENTITY_NET);
    let spec = format!("{}:Net", model.display());
    let (code, err) = stderr_of(&["profile", "--model", &spec, "--device", "cpu", "-o", trace]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "hint: pass the file and the class apart: `--model {} --class Net`",
            model.display()
        )),
        "{err}"
    );
}

/// A deploy mode that replays CUDA graphs cannot be verified on the CPU: `run` says so
/// before the experiments (not after them, when the verification would fail) and leaves no
/// workspace.
#[test]
fn a_gpu_deploy_mode_on_the_cpu_is_refused_before_the_experiments() {
    for mode in ["cudagraph", "reduce-overhead"] {
        let (_keep, ws) = tempdir();
        let w = ws.to_str().unwrap();
        let (code, err) = stderr_of(&[
            "run",
            "--example",
            "tiny",
            "--device",
            "cpu",
            "--deploy",
            mode,
            "-w",
            w,
        ]);
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains(&format!("--deploy {mode} needs a GPU")) && !err.contains("experiment 1"),
            "{err}"
        );
        assert!(!ws.exists(), "the refused run left {}", ws.display());
    }
}

/// bfloat16 cannot run on the CPU: `run` and `tune` say so before they profile or create
/// anything (a workspace made first would be left planned in a dtype it cannot run).
#[test]
fn bfloat16_on_the_cpu_is_refused_before_anything_is_created() {
    let (keep, ws) = tempdir();
    let w = ws.to_str().unwrap();
    let (code, err) = stderr_of(&[
        "run",
        "--example",
        "tiny",
        "--device",
        "cpu",
        "--dtype",
        "bfloat16",
        "-w",
        w,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--dtype bfloat16 cannot run on the CPU")
            && err.contains("hint: pass --dtype float16 or float32"),
        "{err}"
    );
    assert!(!ws.exists(), "the refused run created {}", ws.display());
    let kernel = keep.path().join("softmax.py");
    new_kernel("softmax", &kernel);
    let (code, err) = stderr_of(&[
        "tune",
        kernel.to_str().unwrap(),
        "--shape",
        "8,64",
        "--device",
        "cpu",
        "--dtype",
        "bfloat16",
        "-w",
        w,
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--dtype bfloat16 cannot run on the CPU"),
        "{err}"
    );
    assert!(!ws.exists(), "the refused tune created {}", ws.display());
}

/// With the device left to `auto` on a machine whose torch sees no GPU, bfloat16 is refused
/// before an existing folder given as the workspace is adopted (no repository, no scripts,
/// no program.md made in it).
#[test]
#[allow(clippy::print_stderr)] // says why it did not run, on a machine with a GPU
fn bfloat16_with_any_device_and_no_gpu_leaves_an_existing_folder_alone() {
    if std::path::Path::new("/dev/nvidia0").exists() {
        eprintln!("skipped: this machine has a GPU (CI has none)");
        return;
    }
    let (keep, ws) = tempdir();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(ws.join("notes.txt"), "mine").unwrap();
    let kernel = keep.path().join("softmax.py");
    new_kernel("softmax", &kernel);
    let w = ws.to_str().unwrap();
    let run = ["run", "--example", "tiny", "--dtype", "bfloat16", "-w", w];
    let tune = [
        "tune",
        kernel.to_str().unwrap(),
        "--shape",
        "8,64",
        "--dtype",
        "bfloat16",
        "-w",
        w,
    ];
    for args in [&run[..], &tune[..]] {
        let (code, err) = stderr_of(args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("--dtype bfloat16 cannot run on the CPU"),
            "{args:?}: {err}"
        );
        // autokernel.log, the record of the refused command, is all it may add
        let mut entries: Vec<_> = std::fs::read_dir(&ws)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|name| name != "autokernel.log")
            .collect();
        entries.sort();
        assert_eq!(entries, ["notes.txt"], "{args:?} touched the folder");
    }
}

/// `report` only reads results.tsv: a workspace one may not write (another user's, a
/// read-only mount) is reported on, and a log a run is still appending to is not "repaired"
/// under it; when report.md cannot be written the summary is printed with a warning.
#[cfg(unix)]
#[test]
fn report_reads_the_log_without_writing_to_it() {
    let (_keep, ws) = tempdir();
    std::fs::create_dir_all(&ws).unwrap();
    std::fs::write(
        ws.join("plan.json"),
        r#"[{"id": "01-softmax", "kind": "softmax", "shapes": [[8, 64]], "dtype": "float32",
            "fraction": 0.5, "op": "aten::_softmax"}]"#,
    )
    .unwrap();
    std::fs::write(
        ws.join("autokernel.toml"),
        "[model]\nsource = \"example\"\nname = \"tiny\"\n",
    )
    .unwrap();
    let header = "experiment\ttimestamp\ttarget\tkind\tagent\tdescription\tcommit\tdecision\tcorrectness\tlatency_us\tthroughput\tthroughput_unit\tpct_peak\tspeedup_vs_reference\tpeak_vram_mb\tduration_s";
    let baseline = "1\t2026-11-29T22:00:00Z\t01-softmax\tsoftmax\ttune\tbaseline\tabc\tbaseline\tPASS\t10.000\t1.000\tGB/s\t1.00\t1.0000\t1.0\t1.00";
    // a row being written by a run at this moment: no final newline yet
    let log = format!("{header}\n{baseline}\n2\t2026-11-29T22:01:00Z\t01-soft");
    std::fs::write(ws.join("results.tsv"), &log).unwrap();
    // (root may write all the same: the torn line below is what tells there)
    let read_only = |on: bool| {
        use std::os::unix::fs::PermissionsExt;
        let mode = |dir: bool| match (on, dir) {
            (true, true) => 0o555,
            (true, false) => 0o444,
            (false, true) => 0o755,
            (false, false) => 0o644,
        };
        for entry in std::fs::read_dir(&ws).unwrap() {
            let path = entry.unwrap().path();
            let perms = std::fs::Permissions::from_mode(mode(path.is_dir()));
            std::fs::set_permissions(&path, perms).unwrap();
        }
        std::fs::set_permissions(&ws, std::fs::Permissions::from_mode(mode(true))).unwrap();
    };
    read_only(true);
    let out = report(&ws);
    read_only(false);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    // the complete baseline row counts, the torn line does not
    assert!(
        stdout.contains("experiments: 0\nbaselines: 1\n"),
        "{stdout}"
    );
    // nothing verified yet: the summary says so and how
    assert!(
        stdout.contains("verification: none yet (autokernel verify --workspace "),
        "{stdout}"
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("results.tsv")).unwrap(),
        log
    );
    assert!(!ws.join("results.tsv.torn").exists());
    // report.md cannot be written (a folder in its place, which stops root too)
    let _ = std::fs::remove_file(ws.join("report.md"));
    std::fs::create_dir(ws.join("report.md")).unwrap();
    let out = report(&ws);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stdout}{stderr}");
    assert!(stderr.contains("warning: cannot write"), "{stderr}");
    assert!(
        stdout.contains("| 01-softmax |") && stdout.contains("report: not written"),
        "{stdout}"
    );
}

/// The interpreter the user named is the one used: a missing AUTOKERNEL_PYTHON is refused
/// by every command in its own name, never swapped for the python3 on PATH, and `bench`
/// no longer calls it `--python`.
#[test]
fn a_missing_autokernel_python_is_refused_by_every_command_in_its_own_name() {
    let (keep, ws) = tempdir();
    let kernel = keep.path().join("softmax.py");
    new_kernel("softmax", &kernel);
    let trace = keep.path().join("trace.json");
    let w = ws.to_str().unwrap();
    let commands: [Vec<&str>; 3] = [
        vec![
            "profile",
            "--example",
            "tiny",
            "--device",
            "cpu",
            "-o",
            trace.to_str().unwrap(),
        ],
        vec!["run", "--example", "tiny", "--device", "cpu", "-w", w],
        vec!["bench", kernel.to_str().unwrap(), "--device", "cpu"],
    ];
    for args in commands {
        let out = autokernel()
            .env("AUTOKERNEL_PYTHON", "/nonexistent/python")
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(
                "error: python `/nonexistent/python` (from AUTOKERNEL_PYTHON) does not exist"
            ),
            "{args:?}: {err}"
        );
        assert!(!ws.exists(), "{args:?} created {}", ws.display());
    }
    // --python wins over the variable, and is named as such
    let out = autokernel()
        .env("AUTOKERNEL_PYTHON", "/nonexistent/python")
        .args([
            "bench",
            kernel.to_str().unwrap(),
            "--python",
            "/no/flag/python",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("python `/no/flag/python` (from --python) does not exist"),
        "{err}"
    );
}

/// `AUTOKERNEL_PYTHON=NAME` (no slash) is looked up on PATH, as a shell would: with the
/// venv's bin folder on PATH (behind a folder that lacks the name), the venv's interpreter
/// is found by its bare file name and hosts the worker (`bench` passes). It used to be
/// refused as "python `python3` does not exist".
#[test]
fn an_autokernel_python_given_as_a_name_is_found_on_path() {
    let python = match std::env::var_os("AUTOKERNEL_PYTHON") {
        Some(_) => autokernel_bench::resolve_python(None).expect("the tests' python"),
        None => std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python"),
    };
    let bin = std::path::absolute(python.parent().unwrap()).unwrap();
    let name = python.file_name().unwrap();
    let (keep, _) = tempdir();
    let kernel = keep.path().join("softmax.py");
    new_kernel("softmax", &kernel);
    let empty = keep.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let mut path = vec![empty, bin];
    path.extend(std::env::split_paths(
        &std::env::var_os("PATH").unwrap_or_default(),
    ));
    let out = autokernel()
        .env("AUTOKERNEL_PYTHON", name)
        .env("PATH", std::env::join_paths(&path).unwrap())
        .env_remove("VIRTUAL_ENV")
        .arg("bench")
        .arg(&kernel)
        .args(["--device", "cpu", "--quick", "--json"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("one JSON object");
    assert_eq!(v["correctness"], "PASS");

    // a name on no folder of PATH: refused, each folder's candidate listed with why
    let (code, err) = {
        let out = autokernel()
            .env("AUTOKERNEL_PYTHON", "no-such-python-name")
            .env("PATH", &path[0])
            .arg("bench")
            .arg(&kernel)
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains(&format!(
            "error: python `no-such-python-name` (from AUTOKERNEL_PYTHON) is not on PATH; tried:\n  `{}/no-such-python-name`: does not exist\n",
            path[0].display()
        )),
        "{err}"
    );
}

/// The scripts Python imports (the harness, the profiling script) are written under
/// `$TMPDIR/autokernel-<uid>`; a folder there that others can write to is refused, with a
/// hint, before Python runs, by the bench worker and by the profiler alike.
#[test]
fn a_scripts_folder_that_others_can_write_to_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let (keep, _) = tempdir();
    let base = keep.path().join("tmp");
    std::fs::create_dir(&base).unwrap();
    // SAFETY: getuid has no preconditions.
    let shared = base.join(format!("autokernel-{}", unsafe { libc::getuid() }));
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o777)).unwrap();
    let kernel = keep.path().join("k.py");
    new_kernel("rmsnorm", &kernel);
    let out_json = keep.path().join("p.json");
    for args in [
        vec![
            "bench",
            kernel.to_str().unwrap(),
            "--device",
            "cpu",
            "--quick",
        ],
        vec![
            "profile",
            "--example",
            "tiny",
            "--device",
            "cpu",
            "-o",
            out_json.to_str().unwrap(),
        ],
    ] {
        let out = autokernel()
            .args(&args)
            .env("TMPDIR", &base)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("mode 777") && stderr.contains("set TMPDIR to a folder of your own"),
            "{args:?}: {stderr}"
        );
    }
    assert_eq!(
        std::fs::read_dir(&shared).unwrap().count(),
        0,
        "nothing written into the shared folder"
    );
    assert!(!out_json.exists());
}

/// `--device cuda` where torch sees no GPU: exit 2 with the one-line reason and the fix,
/// once, without a Python traceback.
#[test]
#[allow(clippy::print_stderr)] // says why it did not run, on a machine with a GPU
fn cuda_without_a_gpu_is_one_clear_line() {
    if std::path::Path::new("/dev/nvidia0").exists() {
        eprintln!("skipped: this machine has a GPU (CI has none)");
        return;
    }
    let (keep, _) = tempdir();
    let kernel = keep.path().join("k.py");
    new_kernel("rmsnorm", &kernel);
    let out = autokernel()
        .args([
            "bench",
            kernel.to_str().unwrap(),
            "--device",
            "cuda",
            "--quick",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert_eq!(stderr.matches("use --device cpu").count(), 1, "{stderr}");
    assert!(!stderr.contains("Traceback"), "{stderr}");
}

/// The pids of `parent`'s child processes, from /proc/*/stat (field 4 is the parent pid).
fn children_of(parent: u32) -> Vec<i32> {
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // "pid (comm) state ppid …": comm may hold spaces, so split after its ')'
        let Some((head, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let ppid = rest
            .split_whitespace()
            .nth(1)
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(parent) {
            if let Some(pid) = head.split_whitespace().next().and_then(|p| p.parse().ok()) {
                pids.push(pid);
            }
        }
    }
    pids
}

/// The `autokernel worker` child of `parent`, waited for up to 60 s.
fn worker_of(parent: u32) -> i32 {
    let is_worker = |pid: &i32| {
        std::fs::read(format!("/proc/{pid}/cmdline"))
            .is_ok_and(|c| c.split(|b| *b == 0).any(|arg| arg == b"worker"))
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if let Some(pid) = children_of(parent).into_iter().find(is_worker) {
            return pid;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no worker process appeared"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// A kernel that hangs in the smoke stage, which is the same at every shape, is waited for
/// once: at the later `--shape`s its TIMEOUT is repeated, saying so, not waited for again.
#[test]
fn bench_waits_once_for_a_kernel_that_hangs_in_smoke() {
    let (keep, _) = tempdir();
    let kernel = keep.path().join("hang.py");
    new_kernel("rmsnorm", &kernel);
    let source = std::fs::read_to_string(&kernel).unwrap();
    let hang = format!("{source}\n\ndef kernel_fn(x, weight):\n    while True:\n        pass\n");
    std::fs::write(&kernel, hang).unwrap();
    let out = autokernel()
        .args([
            "bench",
            kernel.to_str().unwrap(),
            "--device",
            "cpu",
            "--quick",
            "--json",
        ])
        .args([
            "--shape", "8,64", "--shape", "5,33", "--shape", "4,16", "--dtype", "float32",
        ])
        .args(["--timeout", "20"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines = json_lines(&stdout);
    assert_eq!(lines.len(), 3, "{stdout}");
    assert!(
        lines.iter().all(|v| v["correctness"] == "TIMEOUT"),
        "{stdout}"
    );
    let reasons: Vec<&str> = lines
        .iter()
        .map(|v| v["reason"].as_str().unwrap())
        .collect();
    assert!(!reasons[0].contains("not run again"), "{}", reasons[0]);
    for (reason, shape) in reasons[1..].iter().zip(["5x33", "4x16"]) {
        assert!(
            reason.starts_with(&format!(
                "not run again at {shape}: the kernel hung while loading or in the smoke stage"
            )),
            "{reason}"
        );
    }
}

/// `bench --json`'s output for several evaluations: one JSON object per line.
fn json_lines(stdout: &str) -> Vec<serde_json::Value> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

/// Whether process `pid` is still running (a zombie or a reaped one is not).
fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        stat.rsplit_once(')')
            .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
    })
}

/// `bench --quick` started on an rmsnorm kernel whose kernel_fn never returns, in `dir`,
/// with piped output; returns it and its worker's pid once the worker is inside the kernel.
fn bench_in_a_hung_kernel(dir: &std::path::Path) -> (std::process::Child, i32) {
    let kernel = dir.join("hang.py");
    new_kernel("rmsnorm", &kernel);
    let source = std::fs::read_to_string(&kernel).unwrap();
    std::fs::write(
        &kernel,
        format!("{source}\n\ndef kernel_fn(x, weight):\n    while True:\n        pass\n"),
    )
    .unwrap();
    let child = autokernel()
        .args([
            "bench",
            kernel.to_str().unwrap(),
            "--device",
            "cpu",
            "--quick",
        ])
        .args(["--timeout", "600"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let worker = worker_of(child.id());
    // long enough for the imports and the first call of kernel_fn, which never returns
    std::thread::sleep(std::time::Duration::from_secs(10));
    assert!(running(worker), "the worker runs the hung kernel");
    (child, worker)
}

/// Asserts that process `worker` ends within 10 s (`of`: whose death it follows).
fn assert_ends_within_10_s(worker: i32, of: &str) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while running(worker) {
        assert!(
            std::time::Instant::now() < deadline,
            "worker {worker} outlived {of} by 10 s"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// A worker whose parent died (SIGKILL, or a SIGTERM the worker itself lives through) while
/// it runs a kernel that never returns ends by itself: no orphan keeps a CPU or the GPU.
#[test]
fn a_worker_ends_when_its_parent_dies_even_inside_a_hung_kernel() {
    let (keep, _) = tempdir();
    let (mut parent, worker) = bench_in_a_hung_kernel(keep.path());
    parent.kill().unwrap();
    parent.wait().unwrap();
    assert_ends_within_10_s(worker, "its parent");
}

/// SIGTERM (or Ctrl-C) to `bench` while it judges a kernel that never returns: it stops at
/// once with exit 130 (README's table) and says so, and its worker goes with it.
#[test]
fn bench_stops_on_sigterm_with_exit_130() {
    let (keep, _) = tempdir();
    let (child, worker) = bench_in_a_hung_kernel(keep.path());
    // SAFETY: kill with a pid and a signal number has no memory preconditions.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("SIGTERM: stopped"), "{stderr}");
    assert_ends_within_10_s(worker, "bench");
}

/// A batch system (Slurm, `docker stop`) sends SIGTERM to every process of a job; the bench
/// worker lives through it, so that the kernel it is judging gets its real verdict rather
/// than a CRASH. Here the signal reaches the worker alone, while it imports torch.
#[test]
fn the_bench_worker_lives_through_a_sigterm() {
    let (keep, _) = tempdir();
    let kernel = keep.path().join("k.py");
    new_kernel("rmsnorm", &kernel);
    let child = autokernel()
        .args([
            "bench",
            kernel.to_str().unwrap(),
            "--device",
            "cpu",
            "--quick",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let worker = worker_of(child.id());
    // past the worker's first instructions (its handler), well before torch is imported
    std::thread::sleep(std::time::Duration::from_millis(300));
    // SAFETY: kill with a pid and a signal number has no memory preconditions.
    assert_eq!(unsafe { libc::kill(worker, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("PASS"), "{stdout}");
}

/// A process started as a bench worker that runs its main() instead of serving (an
/// embedding program that forgot to hand `worker` to serve_worker()) does not start workers
/// of its own without end: it is refused with the line that fixes it. The environment the
/// parent sets for a worker marks `bench` here as such a process.
#[test]
fn a_worker_process_that_does_not_serve_starts_no_worker_of_its_own() {
    let (keep, _) = tempdir();
    let kernel = keep.path().join("k.py");
    new_kernel("rmsnorm", &kernel);
    let out = autokernel()
        .args([
            "bench",
            kernel.to_str().unwrap(),
            "--device",
            "cpu",
            "--quick",
        ])
        .env("AUTOKERNEL_WORKER_PYTHON", "/usr/bin/python3")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("started as a bench worker") && stderr.contains("serve_worker()"),
        "{stderr}"
    );
}

/// `--model m:Net` run beside m.py: the current folder is not on Python's import path, and
/// the error says how to load the file instead.
#[test]
fn a_module_beside_the_current_folder_gets_a_hint_to_pass_the_file() {
    let (dir, _) = tempdir();
    std::fs::write(
        dir.path().join("m.py"),
        "import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x\n",
    )
    .unwrap();
    let out = autokernel()
        .current_dir(dir.path())
        .args([
            "profile",
            "--model",
            "m:Net",
            "--input-shape",
            "4,16",
            "--device",
            "cpu",
        ])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("No module named 'm'"), "{stderr}");
    assert!(
        stderr.contains("hint: `m.py` is in the current folder")
            && stderr.contains("`--model m.py --class Net`"),
        "{stderr}"
    );
}

/// `new-kernel -o PATH` says on stderr what it wrote and what to run next; stdout stays
/// empty. Without `-o` the starter alone goes to stdout (it is the data) and stderr stays
/// empty; `-q` silences the message.
#[test]
fn new_kernel_says_what_it_wrote_on_stderr_only() {
    let (keep, _) = tempdir();
    let path = keep.path().join("k.py");
    let out = autokernel()
        .args(["new-kernel", "softmax", "-o"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), "");
    let p = path.display();
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        format!("wrote {p}: softmax starter, kernel_fn(x); judge it with `autokernel bench {p}`, tune it with `autokernel tune {p} --shape rows,cols`\n")
    );
    let written = std::fs::read_to_string(&path).unwrap();
    let out = autokernel()
        .args(["new-kernel", "softmax"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout), written);
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
    let out = autokernel()
        .args(["-q", "new-kernel", "softmax", "--force", "-o"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "");
}

/// `--iterations 0` would record no forward pass: `profile` and `run` refuse it (exit 2)
/// before starting anything, saying why; `profile --import` refuses the flag outright.
#[test]
fn profile_iterations_zero_is_refused_with_the_reason() {
    let (_d, ws) = tempdir();
    let w = ws.to_str().unwrap();
    for args in [
        vec![
            "profile",
            "--example",
            "tiny",
            "--device",
            "cpu",
            "--iterations",
            "0",
        ],
        vec![
            "run",
            "--example",
            "tiny",
            "--device",
            "cpu",
            "-w",
            w,
            "--iterations",
            "0",
        ],
    ] {
        let (code, err) = stderr_of(&args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("invalid value '0' for '--iterations <N>': 0 forward passes would record nothing to rank; pass 1 or more"),
            "{args:?}: {err}"
        );
        assert!(!ws.exists(), "{args:?} created {}", ws.display());
    }
    let (code, err) = stderr_of(&["profile", "--import", "t.json", "--iterations", "5"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("'--import <TRACE>' cannot be used with '--iterations <N>'"),
        "{err}"
    );
}

/// The starters' paths their own judging does not reach (the wide-row loops with their
/// blocks forced small, masked rows walked in chunks shorter than their -inf runs, which
/// made the softmax and cross-entropy starters return NaN before their running max was
/// shifted by 0, random TUNABLES), judged through this binary's `bench --json`
/// (`autokernel-bench/python/tests/check_starters.py`, which exits 1 naming any variant
/// that does not PASS).
#[test]
fn starter_variants_pass_the_judge_through_bench_json() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = std::env::var_os("AUTOKERNEL_PYTHON")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| root.join(".venv/bin/python"));
    let out = std::process::Command::new(python)
        .arg(root.join("autokernel-bench/python/tests/check_starters.py"))
        .env("AUTOKERNEL_BIN", env!("CARGO_BIN_EXE_autokernel"))
        .env("TRITON_INTERPRET", "1")
        .output()
        .expect("python runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.trim_end().ends_with(", 0 failures"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bench_params_that_the_kind_does_not_take_exit_2_naming_them() {
    let (d, _ws) = tempdir();
    let path = d.path().join("softmax.py");
    new_kernel("softmax", &path);
    let kernel = path.to_str().unwrap();
    // with --kind the flag is checked before any worker starts
    let (code, err) = stderr_of(&[
        "bench", kernel, "--device", "cpu", "--kind", "softmax", "--param", "eps=1e-5",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("softmax has no parameter `eps`; it takes none"),
        "{err}"
    );
    // without it the worker checks them against the file's KERNEL_KIND
    let (code, err) = stderr_of(&["bench", kernel, "--device", "cpu", "--param", "eps=1e-5"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("softmax has no parameter `eps`; it takes none"),
        "{err}"
    );
    let (code, err) = stderr_of(&["bench", kernel, "--param", "eps"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("`eps` is not NAME=VALUE"), "{err}");
}

#[test]
fn bench_param_eps_reaches_the_rmsnorm_reference_and_kernel() {
    let (d, _ws) = tempdir();
    let starter = d.path().join("rmsnorm.py");
    new_kernel("rmsnorm", &starter);
    let source = std::fs::read_to_string(&starter).unwrap();
    let hands_over = "n_rows, n_cols, float(eps),";
    assert!(
        source.contains(hands_over),
        "the starter passes eps to its kernel"
    );
    // takes the keyword but keeps the default epsilon
    let ignores = d.path().join("ignores.py");
    std::fs::write(&ignores, source.replace(hands_over, "n_rows, n_cols, EPS,")).unwrap();
    let verdict = |path: &std::path::Path, eps: &str| {
        let out = autokernel()
            .args(["bench", "--device", "cpu", "--quick", "--json", "--param"])
            .arg(format!("eps={eps}"))
            .arg(path)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(
            v["params"]["eps"],
            serde_json::json!(eps.parse::<f64>().unwrap())
        );
        (
            v["correctness"].as_str().unwrap().to_string(),
            v["reason"].clone(),
        )
    };
    // x ~ N(0, 1e-6) rows in the "small" mode: mean(x²) ~ 1e-6, so eps 1e-2 against 1e-6
    // changes the output ~100-fold
    assert_eq!(verdict(&starter, "1e-2").0, "PASS");
    let (label, reason) = verdict(&ignores, "1e-2");
    assert_eq!(label, "FAIL", "{reason}");
    assert_eq!(verdict(&ignores, "1e-6").0, "PASS");
}

#[test]
fn bench_params_reach_the_flash_attention_reference_and_kernel() {
    let (d, _ws) = tempdir();
    let starter = d.path().join("flash_attention.py");
    new_kernel("flash_attention", &starter);
    let source = std::fs::read_to_string(&starter).unwrap();
    let honours = "scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)";
    assert!(source.contains(honours), "the starter reads its scale");
    // takes the keyword but always scales by 1/√d
    let ignores = d.path().join("ignores.py");
    std::fs::write(
        &ignores,
        source.replace(honours, "scale = 1.0 / math.sqrt(head_dim)"),
    )
    .unwrap();
    let verdict = |path: &std::path::Path, params: &[&str]| {
        let mut cmd = autokernel();
        cmd.args(["bench", "--device", "cpu", "--quick", "--json"]);
        for p in params {
            cmd.args(["--param", p]);
        }
        let out = cmd.arg(path).output().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        (v["correctness"].as_str().unwrap().to_string(), v)
    };
    // BERT's: every key, a padding mask, its own scale; and GQA with two heads sharing one
    let bert = ["causal=false", "scale=0.1", "has_mask=true"];
    let (label, v) = verdict(&starter, &bert);
    assert_eq!(label, "PASS", "{v}");
    assert_eq!(v["params"]["causal"], serde_json::json!(false));
    assert_eq!(v["params"]["scale"], serde_json::json!(0.1));
    assert_eq!(v["params"]["has_mask"], serde_json::json!(true));
    let (label, v) = verdict(&starter, &["kv_heads=1"]);
    assert_eq!(label, "PASS", "{v}");
    assert_eq!(v["params"]["kv_heads"], serde_json::json!(1));
    // scores scaled by 0.1 instead of 1/√16 = 0.25 or 1/√32: another softmax
    let (label, v) = verdict(&ignores, &bert);
    assert_eq!(label, "FAIL", "{v}");
    // at the default scale the variant is the starter
    let (label, v) = verdict(&ignores, &["causal=false"]);
    assert_eq!(label, "PASS", "{v}");
    // the kind's own shapes are fitted to the K/V head count (heads rounded up to a
    // multiple of 3), but a shape of the user's whose heads it does not divide is refused
    // with the reason
    let (label, v) = verdict(&starter, &["kv_heads=3"]);
    assert_eq!(label, "PASS", "{v}");
    let out = autokernel()
        .args([
            "bench",
            "--device",
            "cpu",
            "--quick",
            "--param",
            "kv_heads=3",
        ])
        .args(["--shape", "1,2,16,16"])
        .arg(&starter)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("kv_heads=3 does not divide heads=2"), "{err}");
}

#[test]
fn bench_param_has_bias_reaches_the_matmul_reference_and_kernel() {
    let (d, _ws) = tempdir();
    let starter = d.path().join("matmul.py");
    new_kernel("matmul", &starter);
    let source = std::fs::read_to_string(&starter).unwrap();
    let takes_bias = "bias = bias.contiguous() if has_bias and bias is not None else None";
    assert!(source.contains(takes_bias), "the starter reads its bias");
    // takes the keywords but never adds the bias
    let ignores = d.path().join("ignores.py");
    std::fs::write(&ignores, source.replace(takes_bias, "bias = None")).unwrap();
    let verdict = |path: &std::path::Path, bias: bool, layout: &str| {
        let out = autokernel()
            .args([
                "bench", "--device", "cpu", "--quick", "--json", "--layout", layout,
            ])
            .arg("--param")
            .arg(format!("has_bias={bias}"))
            .arg(path)
            .output()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
        assert_eq!(v["params"]["has_bias"], serde_json::json!(bias));
        (
            v["correctness"].as_str().unwrap().to_string(),
            v["reason"].clone(),
        )
    };
    for layout in ["contiguous", "b_transposed"] {
        assert_eq!(verdict(&starter, true, layout).0, "PASS", "{layout}");
        let (label, reason) = verdict(&ignores, true, layout);
        assert_eq!(label, "FAIL", "{layout}: {reason}");
    }
    assert_eq!(verdict(&ignores, false, "contiguous").0, "PASS");
}
