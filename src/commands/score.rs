//! `autokernel score`: judge a folder of candidates on a folder of KernelBench-format
//! problems and report KernelBench's figures, the correctness rate and fast_p.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use autokernel_bench::problem::{problem_files, ProblemRequest, ProblemVerdict, DEFAULT_SEEDS};
use autokernel_bench::{PyWorkerBenchmarker, WorkerError, WorkerOptions, WorkerProgram};
use autokernel_core::Device;
use serde_json::json;

use crate::global_args::GlobalArgs;

const EXAMPLES: &str = "Examples:
  autokernel score --problems examples/problems --candidates my_kernels
  autokernel score --problems KernelBench/level1 --candidates out/level1 --compile --json

Each problem P.py (directly in --problems, or in its level folders level1/, level2/, …) is
judged with the candidate at the same relative path under --candidates, or at
<same path without .py>/kernel.py (the only layout when --candidates is --problems); a
problem without a candidate (MISSING) or a file that is not a usable problem (ERROR, with
the judge's reason) counts as not correct, and the run goes on.

fast_p (KernelBench): the share of all problems whose candidate is correct and more than p
times faster than the baseline; fast_0 is the correctness rate.

Exit codes: 0 every problem's candidate PASSes; 1 otherwise; 2 usage or environment error.";

/// The thresholds fast_p is reported at (KernelBench's paper reports fast_1 and fast_0
/// up to 2).
pub const FAST_P: [f64; 4] = [0.0, 1.0, 1.5, 2.0];

/// Arguments of `autokernel score`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct ScoreArgs {
    /// The folder of problems (KernelBench's format), with or without level folders
    #[arg(long, value_name = "DIR")]
    pub problems: PathBuf,
    /// The folder of candidates (`class ModelNew`), laid out like --problems
    #[arg(long, value_name = "DIR")]
    pub candidates: PathBuf,
    /// Where to run: auto (CUDA when available), cuda, or cpu (Triton's interpreter;
    /// correctness is real there, speedups are not)
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|cuda|cpu",
        env = "AUTOKERNEL_DEVICE"
    )]
    pub device: Device,
    /// Also time torch.compile of each reference, for fast_p against it
    #[arg(long)]
    pub compile: bool,
    /// One seed and 10 timed trials per problem instead of five seeds and 100
    #[arg(long)]
    pub quick: bool,
    /// Judge correctness only: no timed trials (fast_p above 0 is then 0); quicker where
    /// timing means nothing, as on the CPU
    #[arg(long)]
    pub no_timing: bool,
    /// Time limit of each candidate's cases, seconds
    #[arg(long, value_name = "SECS", default_value_t = 600)]
    pub timeout: u64,
    /// The Python interpreter whose environment the worker adopts [default:
    /// $AUTOKERNEL_PYTHON, $VIRTUAL_ENV, python3]
    #[arg(long, value_name = "PATH|NAME")]
    pub python: Option<PathBuf>,
    /// Print one JSON object (per-problem verdicts, the rates per level and in all)
    #[arg(long)]
    pub json: bool,
}

/// One problem's outcome, for the rates.
#[derive(Debug, Clone, PartialEq)]
pub struct Scored {
    /// The level folder (`level1`), or "" for a problem directly in --problems.
    pub level: String,
    /// The candidate PASSed.
    pub correct: bool,
    /// eager / candidate, for a correct candidate.
    pub speedup_vs_eager: Option<f64>,
    /// compiled / candidate, for a correct candidate timed against torch.compile.
    pub speedup_vs_compiled: Option<f64>,
}

/// fast_p over `scored`: the share of all of them correct with a speedup above `p`
/// (`speedup` picks the baseline); p = 0 counts every correct one (KernelBench's
/// definition, arXiv 2502.10517 §3). `None` for an empty set.
pub fn fast_p(scored: &[&Scored], p: f64, speedup: fn(&Scored) -> Option<f64>) -> Option<f64> {
    if scored.is_empty() {
        return None;
    }
    let fast = scored
        .iter()
        .filter(|s| s.correct && (p == 0.0 || speedup(s).is_some_and(|x| x > p)))
        .count();
    Some(fast as f64 / scored.len() as f64)
}

/// The candidate of problem `rel` (a path relative to --problems) under `candidates`:
/// the file at the same relative path, or `<rel without .py>/kernel.py`; never `problem`
/// itself (where --candidates is --problems, only the folder layout applies).
fn candidate_of(candidates: &Path, rel: &Path, problem: &Path) -> Option<PathBuf> {
    let same = candidates.join(rel);
    let folder = candidates.join(rel.with_extension("")).join("kernel.py");
    let problem = problem.canonicalize().ok();
    [same, folder]
        .into_iter()
        .find(|p| p.is_file() && p.canonicalize().ok() != problem)
}

/// What became of one problem.
enum Outcome {
    /// No candidate file for it.
    Missing,
    /// The problem file is not a usable problem (the judge's reason).
    Unusable(String),
    /// The judge's verdict on its candidate.
    Judged(Box<ProblemVerdict>),
}

impl Outcome {
    fn label(&self) -> &str {
        match self {
            Outcome::Missing => "MISSING",
            Outcome::Unusable(_) => "ERROR",
            Outcome::Judged(v) => v.correctness.label(),
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            Outcome::Missing => Some("no candidate"),
            Outcome::Unusable(why) => Some(why),
            Outcome::Judged(v) => v.correctness.reason(),
        }
    }

    fn verdict(&self) -> Option<&ProblemVerdict> {
        match self {
            Outcome::Judged(v) => Some(v),
            _ => None,
        }
    }
}

/// Runs `autokernel score`.
///
/// # Errors
/// A folder that does not exist or holds no problem; an unusable problem file or Python.
pub async fn run(args: ScoreArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    for (flag, dir) in [
        ("--problems", &args.problems),
        ("--candidates", &args.candidates),
    ] {
        if !dir.is_dir() {
            anyhow::bail!("{flag} `{}` is not a folder", dir.display());
        }
    }
    let problems = problem_files(&args.problems)?;
    if problems.is_empty() {
        anyhow::bail!(
            "no problem (*.py) in `{}` or its level folders; a problem is a file with `class Model`, \
             `get_inputs()` and `get_init_inputs()` (docs/problems.md)",
            args.problems.display()
        );
    }
    let options = WorkerOptions {
        python: Some(autokernel_bench::resolve_python(args.python.as_deref())?),
        program: WorkerProgram::default(),
        device: args.device,
        gpu_bandwidth_gb_s: None,
    };
    let bench = PyWorkerBenchmarker::new(options);
    let worker = bench.worker().clone();
    let mut rows: Vec<(PathBuf, Outcome, Scored)> = Vec::new();
    for (i, problem) in problems.iter().enumerate() {
        let rel = problem
            .strip_prefix(&args.problems)
            .unwrap_or(problem)
            .to_path_buf();
        let level = if rel.components().count() > 1 {
            rel.components()
                .next()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .unwrap_or_default()
        } else {
            String::new()
        };
        #[allow(clippy::print_stderr)]
        {
            eprintln!("[{}/{}] {}", i + 1, problems.len(), rel.display());
        }
        let unscored = Scored {
            level,
            correct: false,
            speedup_vs_eager: None,
            speedup_vs_compiled: None,
        };
        let Some(kernel) = candidate_of(&args.candidates, &rel, problem) else {
            rows.push((rel, Outcome::Missing, unscored));
            continue;
        };
        let request = ProblemRequest {
            problem: problem.clone(),
            kernel,
            device: args.device,
            seeds: if args.quick { 1 } else { DEFAULT_SEEDS },
            trials: if args.no_timing {
                Some(0)
            } else {
                args.quick.then_some(10)
            },
            compiled: args.compile && !args.no_timing,
            timeout: Duration::from_secs(args.timeout),
        };
        let verdict = match worker.judge_problem(&request).await {
            Ok(v) => v,
            // a file in the folder that is not a usable problem is that problem's outcome
            Err(WorkerError::Python { message, .. }) => {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("  not a usable problem: {message}");
                }
                rows.push((rel, Outcome::Unusable(message), unscored));
                continue;
            }
            Err(e) => {
                worker.shutdown().await;
                return Err(anyhow::Error::new(e)
                    .context(format!("cannot judge the problem `{}`", problem.display())));
            }
        };
        let scored = Scored {
            correct: verdict.correctness.is_pass(),
            speedup_vs_eager: verdict.speedup_vs_eager,
            speedup_vs_compiled: verdict.speedup_vs_compiled,
            ..unscored
        };
        rows.push((rel, Outcome::Judged(Box::new(verdict)), scored));
    }
    worker.shutdown().await;
    let device = rows
        .iter()
        .find_map(|(_, o, _)| o.verdict().map(|v| v.device.clone()))
        .unwrap_or_default();
    let all: Vec<&Scored> = rows.iter().map(|(_, _, s)| s).collect();
    let mut levels: BTreeMap<String, Vec<&Scored>> = BTreeMap::new();
    for s in &all {
        levels.entry(s.level.clone()).or_default().push(s);
    }
    let rates = |set: &[&Scored]| {
        let of = |speedup: fn(&Scored) -> Option<f64>| -> BTreeMap<String, Option<f64>> {
            FAST_P
                .iter()
                .map(|p| (format!("fast_{p}"), fast_p(set, *p, speedup)))
                .collect()
        };
        json!({
            "problems": set.len(),
            "correct": set.iter().filter(|s| s.correct).count(),
            "correctness_rate": fast_p(set, 0.0, |s| s.speedup_vs_eager),
            "vs_eager": of(|s| s.speedup_vs_eager),
            "vs_compiled": if args.compile { json!(of(|s| s.speedup_vs_compiled)) } else { json!(null) },
        })
    };
    let mut out = std::io::stdout().lock();
    if args.json {
        let results: Vec<serde_json::Value> = rows
            .iter()
            .map(|(rel, o, _)| {
                let v = o.verdict();
                json!({
                    "problem": rel.display().to_string(),
                    "candidate": v.map(|v| v.kernel.display().to_string()),
                    "correctness": o.label(),
                    "reason": o.reason(),
                    "latency_us": v.and_then(|v| v.latency_us),
                    "eager_latency_us": v.and_then(|v| v.eager_latency_us),
                    "compiled_latency_us": v.and_then(|v| v.compiled_latency_us),
                    "speedup_vs_eager": v.and_then(|v| v.speedup_vs_eager),
                    "speedup_vs_compiled": v.and_then(|v| v.speedup_vs_compiled),
                })
            })
            .collect();
        let by_level: BTreeMap<&String, serde_json::Value> = levels
            .iter()
            .filter(|(l, _)| !l.is_empty())
            .map(|(l, set)| (l, rates(set)))
            .collect();
        let v = json!({
            "device": device,
            "timing_representative": device == "cuda",
            "all": rates(&all),
            "levels": by_level,
            "results": results,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&v)?)?;
    } else {
        writeln!(
            out,
            "{:<40} {:<8} {:>10} {:>12}  reason",
            "problem", "verdict", "vs eager", "vs compile"
        )?;
        for (rel, o, s) in &rows {
            let x = |r: Option<f64>| r.map_or("-".to_string(), |r| format!("{r:.2}x"));
            writeln!(
                out,
                "{:<40} {:<8} {:>10} {:>12}  {}",
                rel.display(),
                o.label(),
                x(s.speedup_vs_eager),
                x(s.speedup_vs_compiled),
                o.reason().unwrap_or("")
            )?;
        }
        writeln!(out)?;
        if device != "cuda" {
            writeln!(
                out,
                "device: {device} (Triton interpreter: correctness is real, speedups are not)"
            )?;
        }
        for (level, set) in levels
            .iter()
            .filter(|(l, _)| !l.is_empty())
            .chain([(&"all".to_string(), &all)])
        {
            let line = |speedup: fn(&Scored) -> Option<f64>| {
                FAST_P
                    .iter()
                    .map(|p| format!("fast_{p} {:.2}", fast_p(set, *p, speedup).unwrap_or(0.0)))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let correct = set.iter().filter(|s| s.correct).count();
            writeln!(
                out,
                "{level}: {correct}/{} correct; vs eager: {}",
                set.len(),
                line(|s| s.speedup_vs_eager)
            )?;
            if args.compile {
                writeln!(
                    out,
                    "{level}: vs torch.compile: {}",
                    line(|s| s.speedup_vs_compiled)
                )?;
            }
        }
    }
    out.flush()?;
    Ok(if all.iter().all(|s| s.correct) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(correct: bool, eager: Option<f64>) -> Scored {
        Scored {
            level: String::new(),
            correct,
            speedup_vs_eager: eager,
            speedup_vs_compiled: None,
        }
    }

    #[test]
    fn fast_p_counts_correct_and_faster_over_all_problems() {
        // 4 problems: correct at 0.5x, correct at 1.2x, correct at 2.5x, wrong at 3x
        let set = [
            s(true, Some(0.5)),
            s(true, Some(1.2)),
            s(true, Some(2.5)),
            s(false, Some(3.0)),
        ];
        let refs: Vec<&Scored> = set.iter().collect();
        let at = |p| fast_p(&refs, p, |s| s.speedup_vs_eager).unwrap();
        assert_eq!(at(0.0), 0.75);
        assert_eq!(at(1.0), 0.5);
        assert_eq!(at(1.5), 0.25);
        assert_eq!(at(2.0), 0.25);
        assert_eq!(at(3.0), 0.0);
        assert_eq!(fast_p(&[], 1.0, |s| s.speedup_vs_eager), None);
    }

    #[test]
    fn a_candidate_is_found_beside_the_problem_path_or_as_its_folder_kernel() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("level1/2_b")).unwrap();
        std::fs::write(dir.path().join("level1/1_a.py"), "").unwrap();
        std::fs::write(dir.path().join("level1/2_b/kernel.py"), "").unwrap();
        let found = |rel: &str| {
            candidate_of(
                dir.path(),
                Path::new(rel),
                &dir.path().join("problems").join(rel),
            )
            .map(|p| p.strip_prefix(dir.path()).unwrap().to_path_buf())
        };
        assert_eq!(found("level1/1_a.py"), Some(PathBuf::from("level1/1_a.py")));
        assert_eq!(
            found("level1/2_b.py"),
            Some(PathBuf::from("level1/2_b/kernel.py"))
        );
        assert_eq!(found("level1/3_c.py"), None);
        // candidates in the problems' own folder: the problem file is never its own candidate
        let own = |rel: &str| {
            candidate_of(dir.path(), Path::new(rel), &dir.path().join(rel))
                .map(|p| p.strip_prefix(dir.path()).unwrap().to_path_buf())
        };
        assert_eq!(own("level1/1_a.py"), None);
        assert_eq!(
            own("level1/2_b.py"),
            Some(PathBuf::from("level1/2_b/kernel.py"))
        );
    }
}
