//! `autokernel bench --problem P.py kernel.py…`: judge candidates on a problem in
//! KernelBench's format (docs/problems.md) and print a case table or one JSON object each.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use autokernel_bench::problem::{ProblemRequest, ProblemVerdict, DEFAULT_SEEDS};
use autokernel_bench::Worker;
use serde_json::json;

use autokernel_core::Device;

/// What `bench --problem` takes of `bench`'s flags.
#[derive(Debug, Clone)]
pub struct ProblemBench<'a> {
    /// The candidate files.
    pub paths: &'a [std::path::PathBuf],
    /// Where to run.
    pub device: Device,
    /// One seed, 10 timed trials.
    pub quick: bool,
    /// Also time torch.compile of the reference.
    pub compile: bool,
    /// Each candidate's limit, seconds.
    pub timeout: u64,
    /// JSON instead of the table.
    pub json: bool,
}

/// Judges every file of `args.paths` on `problem`, one after another; exit 0 when all
/// PASS, 1 otherwise.
///
/// # Errors
/// The problem file is missing or not a problem, or the worker cannot run.
pub async fn run(
    args: &ProblemBench<'_>,
    problem: &Path,
    worker: &Worker,
) -> anyhow::Result<ExitCode> {
    if !problem.is_file() {
        anyhow::bail!(
            "problem file `{}` not found; a problem is a Python file with `class Model`, \
             `get_inputs()` and `get_init_inputs()` (docs/problems.md)",
            problem.display()
        );
    }
    let several = args.paths.len() > 1;
    let mut all_passed = true;
    for path in args.paths {
        let request = ProblemRequest {
            problem: problem.to_path_buf(),
            kernel: path.clone(),
            device: args.device,
            seeds: if args.quick { 1 } else { DEFAULT_SEEDS },
            trials: args.quick.then_some(10),
            compiled: args.compile,
            timeout: Duration::from_secs(args.timeout),
        };
        let started = Instant::now();
        let verdict = worker.judge_problem(&request).await.map_err(|e| {
            anyhow::Error::new(e).context(format!(
                "cannot judge `{}` on the problem `{}`",
                path.display(),
                problem.display()
            ))
        })?;
        let turnaround_s = started.elapsed().as_secs_f64();
        all_passed &= verdict.correctness.is_pass();
        let mut out = std::io::stdout().lock();
        if args.json {
            crate::output::write_json(&mut out, &to_json(&verdict, turnaround_s), several)?;
        } else {
            write!(out, "{}", table(&verdict))?;
            writeln!(out, "turnaround_s: {turnaround_s:.2}")?;
            if several {
                writeln!(out)?;
            }
        }
        out.flush()?;
    }
    Ok(if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// The JSON of one verdict: `correctness` (PASS, FAIL, …), `failed_stage`, `reason`, the
/// verdict's own fields ([`ProblemVerdict`]) and `turnaround_s`.
fn to_json(v: &ProblemVerdict, turnaround_s: f64) -> serde_json::Value {
    json!({
        "problem": v.problem.display().to_string(),
        "path": v.kernel.display().to_string(),
        "correctness": v.correctness.label(),
        "failed_stage": v.correctness.failed_stage().map(|s| s.name()),
        "reason": v.correctness.reason(),
        "cases": v.cases,
        "shrunk_sizes": v.shrunk_sizes,
        "shrunk_skipped": v.shrunk_skipped,
        "latency_us": v.latency_us,
        "eager_latency_us": v.eager_latency_us,
        "compiled_latency_us": v.compiled_latency_us,
        "speedup_vs_eager": v.speedup_vs_eager,
        "speedup_vs_compiled": v.speedup_vs_compiled,
        "compile_error": v.compile_error,
        "source_sha256": v.source_sha256,
        "device": v.device,
        "timing_representative": v.device == "cuda",
        "turnaround_s": turnaround_s,
    })
}

/// The case table: one line per case, then the verdict and the timings.
fn table(v: &ProblemVerdict) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    let _ = writeln!(s, "problem: {}", v.problem.display());
    let _ = writeln!(s, "kernel:  {}", v.kernel.display());
    let note = if v.device == "cuda" {
        ""
    } else {
        " (Triton interpreter: correctness is real, timings are not representative)"
    };
    let _ = writeln!(s, "device:  {}{note}\n", v.device);
    let _ = writeln!(
        s,
        "{:<6} {:<8} {:<6} {:>12}  detail",
        "seed", "sizes", "result", "max_abs_err"
    );
    for c in &v.cases {
        let err = c
            .max_abs_error
            .map_or("-".to_string(), |e| format!("{e:.3e}"));
        let _ = writeln!(
            s,
            "{:<6} {:<8} {:<6} {:>12}  {}",
            c.seed,
            if c.shrunk { "shrunk" } else { "default" },
            if c.passed { "ok" } else { "FAIL" },
            err,
            c.reason.as_deref().unwrap_or("")
        );
    }
    if let Some(why) = &v.shrunk_skipped {
        let _ = writeln!(s, "shrunk case not judged: {why}");
    }
    let _ = writeln!(s);
    match v.correctness.reason() {
        Some(reason) => writeln!(s, "verdict: {} — {reason}", v.correctness.label()),
        None => writeln!(s, "verdict: {}", v.correctness.label()),
    }
    .ok();
    let us = |x: Option<f64>| x.map_or("-".to_string(), |x| format!("{x:.1} µs"));
    if v.latency_us.is_some() || v.eager_latency_us.is_some() {
        let _ = writeln!(
            s,
            "latency: ModelNew {}, Model eager {}, torch.compile {}",
            us(v.latency_us),
            us(v.eager_latency_us),
            us(v.compiled_latency_us)
        );
    }
    if let Some(x) = v.speedup_vs_eager {
        let vs_compiled = v
            .speedup_vs_compiled
            .map_or(String::new(), |c| format!(", {c:.2}x vs torch.compile"));
        let _ = writeln!(s, "speedup: {x:.2}x vs eager{vs_compiled}");
    }
    s
}
