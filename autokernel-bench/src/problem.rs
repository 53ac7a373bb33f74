//! Judging a candidate on a problem in KernelBench's format (issue 38; docs/problems.md): a
//! reference `class Model` with `get_inputs()` and `get_init_inputs()`, a candidate whose
//! `class ModelNew` has the same constructor.
//!
//! The candidate runs in a fresh sandboxed worker, as a kind's candidate does, and writes its
//! outputs to files; the trusted script worker builds the reference for the same cases,
//! compares, and times the reference. The verdict is made here from both replies, so no
//! reference output ever exists in the candidate's process (docs/bench.md, "Threat model").

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use autokernel_core::{Correctness, Device, Stage};
use serde::Serialize;
use serde_json::{json, Value};

use crate::protocol::{ProblemCase, ProblemJob};
use crate::{Worker, WorkerError};

/// The first case's seed (`problems.FIRST_SEED`); case `i` at the problem's own sizes uses
/// `FIRST_SEED + i`, the shrunk case `FIRST_SEED` again.
pub const FIRST_SEED: u64 = 42;

/// KernelBench's number of correctness trials (distinct seeds) per problem.
pub const DEFAULT_SEEDS: u32 = 5;

/// KernelBench's number of timed trials.
pub const DEFAULT_TRIALS_GPU: u32 = 100;

/// Timed trials on the CPU, where Triton's interpreter makes timing meaningless anyway.
pub const DEFAULT_TRIALS_CPU: u32 = 3;

/// What to judge and how.
#[derive(Debug, Clone)]
pub struct ProblemRequest {
    /// The problem file.
    pub problem: PathBuf,
    /// The candidate file (`class ModelNew`).
    pub kernel: PathBuf,
    /// Where to run (auto, cuda, cpu).
    pub device: Device,
    /// Cases at the problem's own sizes, one seed each; the shrunk case comes after them.
    pub seeds: u32,
    /// Timed calls of the candidate and of the reference at the first case; 0: no timing;
    /// `None`: [`DEFAULT_TRIALS_GPU`] on the GPU, [`DEFAULT_TRIALS_CPU`] on the CPU.
    pub trials: Option<u32>,
    /// Also time `torch.compile` of the reference.
    pub compiled: bool,
    /// The candidate's whole run (every case and its timing); past it, TIMEOUT.
    pub timeout: Duration,
}

/// One case's outcome.
#[derive(Debug, Clone, Serialize)]
pub struct ProblemCaseReport {
    /// The case's seed (the weights', set before `get_init_inputs()` and the model).
    pub seed: u64,
    /// The seed the inputs were drawn under, picked after `ModelNew` was built; None when the
    /// case failed before its inputs were drawn.
    pub input_seed: Option<u64>,
    /// At the shrunk sizes.
    pub shrunk: bool,
    /// Every output within the tolerance.
    pub passed: bool,
    /// The largest |candidate − reference| over the outputs, where they could be compared.
    pub max_abs_error: Option<f64>,
    /// Why it did not pass.
    pub reason: Option<String>,
}

/// The verdict on one candidate, with the figures it was made from.
#[derive(Debug, Clone, Serialize)]
pub struct ProblemVerdict {
    /// The problem file.
    pub problem: PathBuf,
    /// The candidate file.
    pub kernel: PathBuf,
    /// PASS, FAIL (a stage and why), TAMPER, CRASH or TIMEOUT.
    pub correctness: Correctness,
    /// Each case, in order.
    pub cases: Vec<ProblemCaseReport>,
    /// The size constants of the shrunk case: name → value.
    pub shrunk_sizes: BTreeMap<String, u64>,
    /// Why there was no shrunk case or it was not judged (the problem has no size constants,
    /// or the reference itself fails at every shrunk size), if so.
    pub shrunk_skipped: Option<String>,
    /// The candidate's median latency, µs (KernelBench's timing: L2 flushed per trial).
    pub latency_us: Option<f64>,
    /// The reference `Model`'s, eager.
    pub eager_latency_us: Option<f64>,
    /// `torch.compile` of the reference's.
    pub compiled_latency_us: Option<f64>,
    /// eager / candidate (> 1: the candidate is faster), for a PASS.
    pub speedup_vs_eager: Option<f64>,
    /// compiled / candidate, for a PASS.
    pub speedup_vs_compiled: Option<f64>,
    /// Why torch.compile of the reference gave no figure, if it did not.
    pub compile_error: Option<String>,
    /// sha256 of the candidate file's bytes, as run.
    pub source_sha256: Option<String>,
    /// `cuda` or `cpu`.
    pub device: String,
}

impl Worker {
    /// Judges `request.kernel` on `request.problem`: the problem checked first (an error,
    /// not a verdict, when it is unusable), the candidate's cases in a fresh sandboxed
    /// worker, then the reference's in the trusted script worker.
    ///
    /// # Errors
    /// [`WorkerError::Python`] when the problem file is not a usable problem (it does not
    /// load, lacks `Model`/`get_inputs`/`get_init_inputs`, or its reference raises);
    /// environment errors as for any request. A candidate that fails, hangs or crashes is
    /// a verdict, never an error.
    pub async fn judge_problem(
        &self,
        request: &ProblemRequest,
    ) -> Result<ProblemVerdict, WorkerError> {
        let dir = crate::worker::bootstrap::write_python_files()
            .map_err(|message| WorkerError::Protocol { message })?;
        let script = dir.join("problems.py");
        let problem = std::path::absolute(&request.problem)?;
        let kernel = std::path::absolute(&request.kernel)?;
        let limit = request.timeout.max(Duration::from_secs(120));
        let described = self
            .call_script(&script, "describe", json!({ "problem": problem }), limit)
            .await?;
        let on_gpu = described["device"] == json!("cuda");
        let trials = request.trials.unwrap_or(if on_gpu {
            DEFAULT_TRIALS_GPU
        } else {
            DEFAULT_TRIALS_CPU
        });
        let mut cases: Vec<ProblemCase> = (0..request.seeds.max(1))
            .map(|i| ProblemCase {
                seed: FIRST_SEED + u64::from(i),
                sizes: BTreeMap::new(),
            })
            .collect();
        let shrunk_sizes: BTreeMap<String, u64> =
            serde_json::from_value(described["shrunk_sizes"].clone()).unwrap_or_default();
        if !shrunk_sizes.is_empty() {
            cases.push(ProblemCase {
                seed: FIRST_SEED,
                sizes: shrunk_sizes.clone(),
            });
        }
        let job = ProblemJob {
            problem: problem.clone(),
            kernel: kernel.clone(),
            cases: cases.clone(),
            trials,
        };
        let outputs = crate::private_temp_dir("problem-outputs")
            .map_err(|message| WorkerError::Protocol { message })?;
        let collect = tempfile::tempdir_in(&outputs)?;
        let mut verdict = ProblemVerdict {
            problem: problem.clone(),
            kernel: kernel.clone(),
            correctness: Correctness::Pass,
            cases: Vec::new(),
            shrunk_sizes,
            shrunk_skipped: described["shrunk_skipped"].as_str().map(str::to_string),
            latency_us: None,
            eager_latency_us: None,
            compiled_latency_us: None,
            speedup_vs_eager: None,
            speedup_vs_compiled: None,
            compile_error: None,
            source_sha256: None,
            device: String::new(),
        };
        let ran = self
            .run_problem(request.device, job, collect.path(), request.timeout)
            .await;
        verdict.device = self
            .device_name()
            .await
            .map(|(d, _)| d)
            .unwrap_or_else(|| "cpu".into());
        let ran = match ran {
            Ok(v) => v,
            Err(WorkerError::Timeout { .. }) => {
                verdict.correctness = Correctness::Timeout {
                    reason: format!(
                        "ModelNew did not finish its cases within {} s",
                        request.timeout.as_secs()
                    ),
                };
                return Ok(verdict);
            }
            Err(WorkerError::Crashed {
                status,
                stderr_tail,
            }) => {
                verdict.correctness = Correctness::Crash {
                    reason: format!("the worker died ({status}): {stderr_tail}"),
                };
                return Ok(verdict);
            }
            Err(e) => return Err(e),
        };
        verdict.source_sha256 = ran["sha256"].as_str().map(str::to_string);
        verdict.latency_us = ran["latency_us"].as_f64();
        if ran["ok"] != json!(true) {
            let line = ran["line"]
                .as_u64()
                .map(|l| format!(" (line {l})"))
                .unwrap_or_default();
            verdict.correctness = Correctness::Fail {
                stage: Stage::Load,
                reason: format!(
                    "{}{line}",
                    ran["message"].as_str().unwrap_or("kernel.py did not load")
                ),
            };
            return Ok(verdict);
        }
        let checked = self
            .call_script(
                &script,
                "check",
                json!({
                    "problem": problem,
                    "cases": cases,
                    "candidate": ran,
                    "outputs_dir": collect.path(),
                    "time_reference": trials > 0,
                    "compiled": request.compiled,
                    "trials": trials.max(1),
                }),
                limit,
            )
            .await?;
        verdict.cases = serde_json::from_value(checked["cases"].clone())
            .map(|cases: Vec<CaseJson>| cases.into_iter().map(CaseJson::report).collect())
            .unwrap_or_default();
        if let Some(why) = checked["skipped"].as_str() {
            verdict.shrunk_skipped = Some(why.to_string());
        }
        verdict.eager_latency_us = checked["eager_latency_us"].as_f64();
        verdict.compiled_latency_us = checked["compiled_latency_us"].as_f64();
        verdict.compile_error = checked["compile_error"].as_str().map(str::to_string);
        verdict.correctness = decide(&ran, &checked, &verdict.cases);
        if verdict.correctness == Correctness::Pass {
            let ratio = |base: Option<f64>| match (base, verdict.latency_us) {
                (Some(b), Some(c)) if c > 0.0 => Some(b / c),
                _ => None,
            };
            verdict.speedup_vs_eager = ratio(verdict.eager_latency_us);
            verdict.speedup_vs_compiled = ratio(verdict.compiled_latency_us);
        }
        Ok(verdict)
    }
}

/// A case as `problems.check` returns it.
#[derive(serde::Deserialize)]
struct CaseJson {
    seed: u64,
    input_seed: Option<u64>,
    shrunk: bool,
    passed: bool,
    max_abs_error: Option<f64>,
    reason: Option<String>,
}

impl CaseJson {
    fn report(self) -> ProblemCaseReport {
        ProblemCaseReport {
            seed: self.seed,
            input_seed: self.input_seed,
            shrunk: self.shrunk,
            passed: self.passed,
            max_abs_error: self.max_abs_error,
            reason: self.reason,
        }
    }
}

/// The stage a case stands for: the shrunk case is the edge shape, the others the sweep.
fn stage_of(shrunk: bool) -> Stage {
    if shrunk {
        Stage::Edge
    } else {
        Stage::ShapeSweep
    }
}

fn at(case: &Value) -> String {
    let seed = case["seed"].as_u64().unwrap_or_default();
    let inputs = case["input_seed"]
        .as_u64()
        .map(|s| format!(", inputs seed {s}"))
        .unwrap_or_default();
    if case["shrunk"] == json!(true) {
        format!("seed {seed}{inputs}, shrunk sizes")
    } else {
        format!("seed {seed}{inputs}")
    }
}

/// The verdict from the candidate's run (`ran`, `harness.run_problem`'s JSON) and the
/// trusted comparison (`checked`, `problems.check`'s; `cases` its cases): conduct first
/// (TAMPER: the harness changed, the reference called, the problem's module rebound, tensors
/// read into NumPy, inputs changed, every compute op of the reference dispatched again, an
/// output replayed or changed once timed),
/// then the outputs (FAIL), then whether the result came from a kernel of its own (right
/// with its kernels skipped, or no launch).
fn decide(ran: &Value, checked: &Value, cases: &[ProblemCaseReport]) -> Correctness {
    let empty = Vec::new();
    let ran_cases = ran["cases"].as_array().unwrap_or(&empty);
    if ran["cuda_error"] == json!(true) {
        let why = ran_cases
            .iter()
            .find_map(|c| c["error"].as_str())
            .unwrap_or("a CUDA error");
        return Correctness::Crash {
            reason: why.to_string(),
        };
    }
    if let Some(names) = ran["guards_changed"].as_array().filter(|n| !n.is_empty()) {
        let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
        return Correctness::Tamper {
            reason: format!("ModelNew replaced the harness's {}", names.join(", ")),
        };
    }
    for case in ran_cases {
        if case["hooks_removed"] == json!(true) {
            return Correctness::Tamper {
                reason: format!("ModelNew removed the judge's module hooks ({})", at(case)),
            };
        }
        if let Some(n) = case["reference_calls"].as_u64().filter(|n| *n > 0) {
            return Correctness::Tamper {
                reason: format!(
                    "ModelNew called the problem's own Model ({n} forward(s) of its classes, {}): a \
                     candidate computes the result itself",
                    at(case)
                ),
            };
        }
        if let Some(names) = case["problem_changed"].as_array().filter(|c| !c.is_empty()) {
            let names: Vec<&str> = names.iter().filter_map(Value::as_str).collect();
            return Correctness::Tamper {
                reason: format!(
                    "ModelNew rebound names of the problem's module ({}, {}): the judge draws the \
                     inputs with the problem's own functions",
                    names.join(", "),
                    at(case)
                ),
            };
        }
        if let Some(n) = case["host_reads"].as_u64().filter(|n| *n > 0) {
            return Correctness::Tamper {
                reason: format!(
                    "ModelNew read tensors into NumPy or Python lists in its forward ({n} \
                     Tensor.numpy/tolist call(s), {}): a problem's work runs in its kernels",
                    at(case)
                ),
            };
        }
        if let Some(changed) = case["inputs_changed"].as_array().filter(|c| !c.is_empty()) {
            let names: Vec<&str> = changed.iter().filter_map(Value::as_str).collect();
            return Correctness::Tamper {
                reason: format!(
                    "ModelNew changed its inputs in place ({}, {}); a forward must leave them as given",
                    names.join(", "),
                    at(case)
                ),
            };
        }
    }
    let names = |key: &str| -> Vec<&str> {
        checked[key]
            .as_array()
            .map(|ops| ops.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    };
    let reference_ops = names("reference_ops");
    // the ops the reference's chains end in: a candidate that calls a lower-level op of the
    // same chain (aten::convolution for aten::conv2d) dispatches those too
    let leaf_ops = names("reference_leaf_ops");
    for case in ran_cases {
        let ops: Vec<&str> = case["ops"]
            .as_array()
            .map(|ops| ops.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if let Some(how) = case["ops_lost"].as_str() {
            return Correctness::Tamper {
                reason: format!(
                    "ModelNew {how} ({}): the op check saw only part of its call",
                    at(case)
                ),
            };
        }
        for set in [&reference_ops, &leaf_ops] {
            if !set.is_empty() && set.iter().all(|op| ops.contains(op)) {
                return Correctness::Tamper {
                    reason: format!(
                        "ModelNew dispatched every op the reference computes with ({}; {}): it \
                         re-runs the reference's own ops instead of a kernel of its own",
                        set.join(", "),
                        at(case)
                    ),
                };
            }
        }
    }
    if let Some(why) = checked["replayed"].as_str() {
        return Correctness::Tamper {
            reason: why.to_string(),
        };
    }
    if let Some(why) = checked["timed"].as_str() {
        return Correctness::Tamper {
            reason: format!("ModelNew's output changed once timed: {why}"),
        };
    }
    if let Some(bad) = cases.iter().find(|c| !c.passed) {
        return Correctness::Fail {
            stage: stage_of(bad.shrunk),
            reason: format!(
                "{}: {}",
                at(&json!({"seed": bad.seed, "input_seed": bad.input_seed, "shrunk": bad.shrunk})),
                bad.reason.as_deref().unwrap_or("wrong result")
            ),
        };
    }
    if let Some(case) = ran_cases
        .iter()
        .find(|c| c["launches"].as_u64() == Some(0) && c["error"].is_null())
    {
        return Correctness::Tamper {
            reason: format!(
                "ModelNew launched no Triton kernel of its own ({}): it re-dispatches PyTorch's \
                 ops, which is the reference, not a kernel",
                at(case)
            ),
        };
    }
    // after the launch count: a candidate that launches nothing is told that, more plainly
    if let Some(why) = checked["without_kernels"].as_str() {
        return Correctness::Tamper {
            reason: format!("ModelNew's kernels are for show: {why}"),
        };
    }
    Correctness::Pass
}

/// The problem files of `dir`, sorted: `*.py` directly in it and in its KernelBench level
/// folders (`level1/`, …), skipping names that start with `_` or `.`.
///
/// # Errors
/// When `dir` cannot be read.
pub fn problem_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    let mut stack = vec![(dir.to_path_buf(), 0)];
    while let Some((d, depth)) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let path = entry?.path();
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name.starts_with(['_', '.']) {
                continue;
            }
            if path.is_dir() && depth == 0 {
                stack.push((path, 1));
            } else if path.extension().is_some_and(|e| e == "py") {
                out.push(path);
            }
        }
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(passed: bool, shrunk: bool) -> ProblemCaseReport {
        ProblemCaseReport {
            seed: 42,
            input_seed: Some(7),
            shrunk,
            passed,
            max_abs_error: Some(0.0),
            reason: (!passed).then(|| "output 0 differs".into()),
        }
    }

    fn ran(launches: u64, extra: Value) -> Value {
        let mut c = json!({"seed": 42, "shrunk": false, "launches": launches, "error": null,
                           "reference_calls": 0, "inputs_changed": [], "hooks_removed": false});
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        json!({"ok": true, "cases": [c], "guards_changed": [], "cuda_error": false})
    }

    #[test]
    fn conduct_outranks_a_wrong_result_and_the_kernel_check_comes_last() {
        let ok = json!({"replayed": null});
        assert_eq!(
            decide(&ran(1, json!({})), &ok, &[case(true, false)]),
            Correctness::Pass
        );
        let no_kernel = decide(&ran(0, json!({})), &ok, &[case(true, false)]);
        assert!(
            matches!(no_kernel, Correctness::Tamper { ref reason } if reason.contains("no Triton kernel"))
        );
        // a wrong result with no kernel is FAIL: the outputs are judged before the launches
        let wrong = decide(&ran(0, json!({})), &ok, &[case(false, true)]);
        assert!(
            matches!(
                wrong,
                Correctness::Fail {
                    stage: Stage::Edge,
                    ..
                }
            ),
            "{wrong:?}"
        );
        let mutated = decide(
            &ran(1, json!({"inputs_changed": ["input 0"]})),
            &ok,
            &[case(false, false)],
        );
        assert!(
            matches!(mutated, Correctness::Tamper { ref reason } if reason.contains("input 0"))
        );
        let called = decide(
            &ran(1, json!({"reference_calls": 2})),
            &ok,
            &[case(true, false)],
        );
        assert!(
            matches!(called, Correctness::Tamper { ref reason } if reason.contains("own Model"))
        );
        // a rebound problem name and a NumPy read are conduct, judged before the outputs
        let rebound = decide(
            &ran(1, json!({"problem_changed": ["get_inputs"]})),
            &ok,
            &[case(false, false)],
        );
        assert!(
            matches!(rebound, Correctness::Tamper { ref reason } if reason.contains("get_inputs"))
        );
        let host = decide(&ran(1, json!({"host_reads": 3})), &ok, &[case(true, false)]);
        assert!(
            matches!(host, Correctness::Tamper { ref reason } if reason.contains("3 Tensor.numpy"))
        );
        // right on its first call and wrong once timed outranks a wrong case
        let timed = json!({"replayed": null, "timed": "its output at timed trial 2 differs"});
        assert!(matches!(
            decide(&ran(1, json!({})), &timed, &[case(false, false)]),
            Correctness::Tamper { ref reason } if reason.contains("once timed")
        ));
        // the reference's chain re-run from below its top-level op: its leaf ops all there
        let leaves = json!({"replayed": null, "reference_ops": ["aten::conv2d"],
                            "reference_leaf_ops": ["aten::mkldnn_convolution"]});
        let below = decide(
            &ran(
                1,
                json!({"ops": ["aten::convolution", "aten::_convolution",
                                   "aten::mkldnn_convolution"]}),
            ),
            &leaves,
            &[case(true, false)],
        );
        assert!(
            matches!(below, Correctness::Tamper { ref reason } if reason.contains("mkldnn")),
            "{below:?}"
        );
        // a candidate with only some of them is not
        assert_eq!(
            decide(
                &ran(1, json!({"ops": ["aten::mm"]})),
                &leaves,
                &[case(true, false)]
            ),
            Correctness::Pass
        );
        // right without its kernels: TAMPER, but only once the outputs are right
        let bare =
            json!({"replayed": null, "without_kernels": "the reference's with them skipped"});
        assert!(matches!(
            decide(&ran(1, json!({})), &bare, &[case(true, false)]),
            Correctness::Tamper { ref reason } if reason.contains("for show")
        ));
        assert!(matches!(
            decide(&ran(1, json!({})), &bare, &[case(false, false)]),
            Correctness::Fail { .. }
        ));
        let replay = json!({"replayed": "replays"});
        assert!(matches!(
            decide(&ran(1, json!({})), &replay, &[case(true, false)]),
            Correctness::Tamper { .. }
        ));
    }

    #[test]
    fn problem_files_are_found_in_the_folder_and_its_level_folders() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("level1")).unwrap();
        for f in ["b.py", "a.py", "_skip.py", "notes.txt", "level1/c.py"] {
            std::fs::write(dir.path().join(f), "").unwrap();
        }
        let names: Vec<String> = problem_files(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.strip_prefix(dir.path()).unwrap().display().to_string())
            .collect();
        assert_eq!(names, ["a.py", "b.py", "level1/c.py"]);
    }
}
