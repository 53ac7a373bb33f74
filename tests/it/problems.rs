//! `autokernel bench --problem`: candidates on problems in KernelBench's format
//! (examples/problems/, candidates in tests/problems/<problem>/), judged on the CPU.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::util::autokernel;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn problem(stem: &str) -> PathBuf {
    root().join("examples/problems").join(format!("{stem}.py"))
}

fn candidate(stem: &str, name: &str) -> PathBuf {
    root()
        .join("tests/problems")
        .join(stem)
        .join(format!("{name}.py"))
}

/// `bench --problem P --json` over `names` of P's candidates: each file's JSON, by name.
fn judge(stem: &str, names: &[&str]) -> (Option<i32>, Vec<(String, Value)>) {
    let out = autokernel()
        .args(["bench", "--device", "cpu", "--json", "--problem"])
        .arg(problem(stem))
        .args(names.iter().map(|n| candidate(stem, n)))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    // one file: one pretty object; several: one line each
    let texts: Vec<&str> = if names.len() == 1 {
        vec![stdout.as_ref()]
    } else {
        stdout.lines().collect()
    };
    let lines: Vec<Value> = texts
        .into_iter()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("{e}: {l}\n{}", String::from_utf8_lossy(&out.stderr)))
        })
        .collect();
    assert_eq!(
        lines.len(),
        names.len(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let named = names.iter().map(|n| n.to_string()).zip(lines).collect();
    (out.status.code(), named)
}

/// The verdict, failed stage and reason each gaming candidate must get, whatever the
/// problem: the file names say what each does (tests/problems/check_candidates.py checks
/// independently that each does it).
fn assert_gaming_verdicts(judged: &[(String, Value)]) {
    for (name, v) in judged {
        let verdict = v["correctness"].as_str().unwrap();
        let reason = v["reason"].as_str().unwrap_or("");
        let stage = v["failed_stage"].as_str().unwrap_or("");
        match name.as_str() {
            "correct" => {
                assert_eq!(verdict, "PASS", "{v}");
                assert!(v["latency_us"].as_f64().unwrap() > 0.0, "{v}");
                assert!(v["eager_latency_us"].as_f64().unwrap() > 0.0, "{v}");
                assert!(v["speedup_vs_eager"].as_f64().is_some(), "{v}");
                // five seeds and the shrunk case, every one within the tolerance
                let cases = v["cases"].as_array().unwrap();
                assert_eq!(cases.len(), 6, "{v}");
                assert!(cases.iter().all(|c| c["passed"] == true), "{v}");
                assert_eq!(cases.last().unwrap()["shrunk"], true, "{v}");
            }
            // an output buffer kept and overwritten each call is no trick: each output is
            // read when it is returned
            "reuses_output" => assert_eq!(verdict, "PASS", "{v}"),
            "wrong" => assert!(
                verdict == "FAIL" && stage == "shape_sweep" && reason.contains("differs"),
                "{v}"
            ),
            // with other ops than the reference's, the launch count catches it; with the
            // reference's own ops, the op check does first
            "no_kernel" => assert!(
                verdict == "TAMPER"
                    && (reason.contains("no Triton kernel") || reason.contains("re-runs")),
                "{v}"
            ),
            "calls_reference" => {
                assert!(verdict == "TAMPER" && reason.contains("own Model"), "{v}")
            }
            "forward_directly" | "calls_aten_convolution" => assert!(
                verdict == "TAMPER" && reason.contains("re-runs the reference's own ops"),
                "{v}"
            ),
            "mutates_inputs" => assert!(
                verdict == "TAMPER" && reason.contains("inputs in place"),
                "{v}"
            ),
            "replays_output" => assert!(verdict == "TAMPER" && reason.contains("replays"), "{v}"),
            "default_shape_only" => assert!(verdict == "FAIL" && stage == "edge", "{v}"),
            "nan_output" => assert!(verdict == "FAIL" && reason.contains("nan"), "{v}"),
            "raises_system_exit" => {
                assert!(verdict == "FAIL" && reason.contains("SystemExit"), "{v}")
            }
            // its answer was kept by the constructor for inputs drawn at its own seed; the
            // judge draws the inputs from a seed it picks only after the constructor ran
            "precomputes_in_init" => assert!(
                verdict == "FAIL" && stage == "shape_sweep" && reason.contains("differs"),
                "{v}"
            ),
            "numpy_compute" => assert!(verdict == "TAMPER" && reason.contains("NumPy"), "{v}"),
            "noop_kernel" => assert!(verdict == "TAMPER" && reason.contains("for show"), "{v}"),
            // the timed trials refill its input with another draw: the kept answer is stale
            // there; where the allocator gave a later case a freed input's address, that case
            // already gets the stale answer (a replay of that earlier case's output)
            "memoizes" => assert!(
                (verdict == "TAMPER"
                    && (reason.contains("once timed") || reason.contains("replays")))
                    || (verdict == "FAIL" && reason.contains("differs")),
                "{v}"
            ),
            "patches_time_call" => assert!(
                verdict == "TAMPER" && reason.contains("problems.time_call"),
                "{v}"
            ),
            "right_then_zeros" => {
                assert!(verdict == "TAMPER" && reason.contains("once timed"), "{v}")
            }
            "rebinds_get_inputs" => {
                assert!(verdict == "TAMPER" && reason.contains("get_inputs"), "{v}")
            }
            other => panic!("no expectation for {other}"),
        }
    }
}

const GAMING: [&str; 7] = [
    "correct",
    "wrong",
    "no_kernel",
    "calls_reference",
    "mutates_inputs",
    "replays_output",
    "default_shape_only",
];

#[test]
fn bench_problem_passes_the_right_model_new_and_catches_each_trick_on_an_elementwise_problem() {
    let mut names = GAMING.to_vec();
    names.extend([
        "forward_directly",
        "nan_output",
        "raises_system_exit",
        "precomputes_in_init",
        "numpy_compute",
        "right_then_zeros",
        "rebinds_get_inputs",
        "noop_kernel",
        "patches_time_call",
        "memoizes",
        "reuses_output",
    ]);
    let (code, judged) = judge("01_relu", &names);
    assert_eq!(code, Some(1), "one verdict is not PASS");
    assert_gaming_verdicts(&judged);
    let reason =
        |name: &str| judged.iter().find(|(n, _)| n == name).unwrap().1["reason"].to_string();
    assert!(
        reason("no_kernel").contains("no Triton kernel"),
        "torch.clamp is not the reference's relu"
    );
    // with --quick's 10 trials the last trial has the other input draw than the checked
    // one: the reused buffer then holds another answer, so its output is read at its trial
    let out = autokernel()
        .args(["bench", "--device", "cpu", "--quick", "--json", "--problem"])
        .arg(problem("01_relu"))
        .arg(candidate("01_relu", "reuses_output"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["correctness"], "PASS", "{v}");
}

#[test]
fn bench_problem_catches_each_trick_on_a_matmul_with_an_epilogue() {
    let (code, judged) = judge("03_linear_bias_relu", &GAMING);
    assert_eq!(code, Some(1));
    assert_gaming_verdicts(&judged);
    let no_kernel = &judged.iter().find(|(n, _)| n == "no_kernel").unwrap().1;
    assert!(
        no_kernel["reason"]
            .as_str()
            .unwrap()
            .contains("aten::linear, aten::relu"),
        "F.linear and relu are the reference's own ops: {no_kernel}"
    );
}

#[test]
fn bench_problem_passes_a_convolution_a_fused_chain_and_a_scalar_reduction() {
    for stem in ["04_conv2d", "08_residual_rmsnorm", "09_mse_loss"] {
        let (code, judged) = judge(stem, &["correct"]);
        assert_eq!(code, Some(0), "{stem}: {judged:?}");
        assert_gaming_verdicts(&judged);
    }
    // the convolution through an op below the reference's own: its chain ends in the same
    // ops, so the op check still sees the reference re-run
    let (code, judged) = judge("04_conv2d", &["calls_aten_convolution"]);
    assert_eq!(code, Some(1), "{judged:?}");
    assert_gaming_verdicts(&judged);
}

#[test]
fn every_candidate_behaves_as_its_file_says_when_checked_without_the_judge() {
    // an independent check of the fixtures: each problem's correct ModelNew matches its
    // Model, each gaming file plays its trick (tests/problems/check_candidates.py)
    let python = std::env::var_os("AUTOKERNEL_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join(".venv/bin/python"));
    let out = Command::new(python)
        .arg(root().join("tests/problems/check_candidates.py"))
        .env("TRITON_INTERPRET", "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("ALL AS EXPECTED"), "{stdout}");
}

#[test]
fn a_file_that_is_not_a_problem_is_an_error_that_says_what_a_problem_is() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.py");
    std::fs::write(
        &bad,
        "import torch\nclass Model(torch.nn.Module):\n    pass\n",
    )
    .unwrap();
    let out = autokernel()
        .args(["bench", "--device", "cpu", "--problem"])
        .arg(&bad)
        .arg(candidate("01_relu", "correct"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("get_inputs, get_init_inputs"), "{stderr}");
    // a tolerance that is not a number is the problem's error, said before any candidate runs
    let loose = dir.path().join("loose.py");
    let relu = std::fs::read_to_string(problem("01_relu")).unwrap();
    std::fs::write(&loose, format!("{relu}\nATOL = \"loose\"\n")).unwrap();
    let out = autokernel()
        .args(["bench", "--device", "cpu", "--problem"])
        .arg(&loose)
        .arg(candidate("01_relu", "correct"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("ATOL = 'loose' is not a tolerance"),
        "{stderr}"
    );
    // a kind's flags make no sense for a problem: refused before any worker starts
    let out = autokernel()
        .args(["bench", "--kind", "softmax", "--problem"])
        .arg(problem("01_relu"))
        .arg(candidate("01_relu", "correct"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("a problem has its own inputs"));
    // and so is a dtype: a problem is judged in float32, as KernelBench does
    let out = autokernel()
        .args(["bench", "--dtype", "float16", "--problem"])
        .arg(problem("01_relu"))
        .arg(candidate("01_relu", "correct"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("float32"));
    // a folder is not a problem: the error names the command that takes one
    let out = autokernel()
        .args(["bench", "--problem"])
        .arg(root().join("examples/problems"))
        .arg(candidate("01_relu", "correct"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("autokernel score --problems"));
}

#[test]
fn score_reports_correctness_and_fast_p_per_level_and_in_all() {
    let problems = tempfile::tempdir().unwrap();
    let candidates = tempfile::tempdir().unwrap();
    for (level, stem, cand) in [
        ("level1", "01_relu", Some("correct")),
        ("level1", "03_linear_bias_relu", Some("wrong")),
        ("level1", "06_softmax", None),
        ("level2", "08_residual_rmsnorm", Some("correct")),
    ] {
        std::fs::create_dir_all(problems.path().join(level)).unwrap();
        std::fs::copy(
            problem(stem),
            problems.path().join(level).join(format!("{stem}.py")),
        )
        .unwrap();
        if let Some(name) = cand {
            // both layouts: beside the problem's path, and as <stem>/kernel.py
            let to = if level == "level1" {
                candidates.path().join(level).join(format!("{stem}.py"))
            } else {
                candidates.path().join(level).join(stem).join("kernel.py")
            };
            std::fs::create_dir_all(to.parent().unwrap()).unwrap();
            std::fs::copy(candidate(stem, name), to).unwrap();
        }
    }
    // a helper file in a level folder, with a candidate: not a problem, reported as such,
    // and the other problems are still judged
    std::fs::write(problems.path().join("level2/99_helpers.py"), "SCALE = 2\n").unwrap();
    std::fs::write(
        candidates.path().join("level2/99_helpers.py"),
        std::fs::read(candidate("01_relu", "correct")).unwrap(),
    )
    .unwrap();
    let out = autokernel()
        .args([
            "score",
            "--device",
            "cpu",
            "--quick",
            "--json",
            "--problems",
        ])
        .arg(problems.path())
        .arg("--candidates")
        .arg(candidates.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "not every candidate passes");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let verdicts: Vec<&str> = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["correctness"].as_str().unwrap())
        .collect();
    assert_eq!(
        verdicts,
        ["PASS", "FAIL", "MISSING", "PASS", "ERROR"],
        "{v}"
    );
    let helper = &v["results"][4];
    assert!(
        helper["reason"]
            .as_str()
            .unwrap()
            .contains("not in KernelBench's format"),
        "{v}"
    );
    // which file was judged, in the layout it was found in
    assert!(v["results"][3]["candidate"]
        .as_str()
        .unwrap()
        .ends_with("08_residual_rmsnorm/kernel.py"));
    assert_eq!(v["all"]["problems"], 5);
    assert_eq!(v["all"]["correct"], 2);
    assert_eq!(v["all"]["correctness_rate"], 0.4);
    assert_eq!(v["levels"]["level1"]["correct"], 1);
    assert_eq!(v["levels"]["level1"]["problems"], 3);
    assert_eq!(v["levels"]["level2"]["vs_eager"]["fast_0"], 0.5);
    // fast_1 over all, recomputed from the per-problem speedups
    let fast_1 = v["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["correctness"] == "PASS" && r["speedup_vs_eager"].as_f64().unwrap() > 1.0)
        .count() as f64
        / 5.0;
    assert_eq!(
        v["all"]["vs_eager"]["fast_1"].as_f64().unwrap(),
        fast_1,
        "{v}"
    );
}

#[test]
fn a_problem_whose_sizes_must_divide_is_shrunk_to_sizes_its_reference_runs_at() {
    // dim splits into heads: 64 -> 47 cannot, so the judge shrinks every size by the second
    // rule, g - g // 4 (16 -> 12, 64 -> 48)
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("heads.py");
    std::fs::write(
        &path,
        "import torch\n\
         batch_size = 16\n\
         dim = 64\n\
         heads = 4\n\
         class Model(torch.nn.Module):\n\
         \x20   def forward(self, x):\n\
         \x20       return x.view(x.shape[0], heads, dim // heads).softmax(-1).view(x.shape[0], dim)\n\
         def get_inputs():\n\
         \x20   return [torch.randn(batch_size, dim)]\n\
         def get_init_inputs():\n\
         \x20   return []\n",
    )
    .unwrap();
    let out = autokernel()
        .args(["bench", "--device", "cpu", "--quick", "--json", "--problem"])
        .arg(&path)
        .arg(candidate("01_relu", "correct"))
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(
        v["shrunk_sizes"],
        json!({"batch_size": 12, "dim": 48}),
        "{v}"
    );
    assert_eq!(v["shrunk_skipped"], Value::Null, "{v}");
    let cases = v["cases"].as_array().unwrap();
    assert_eq!(cases.last().unwrap()["shrunk"], true, "{v}");
}
