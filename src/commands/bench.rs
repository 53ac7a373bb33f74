//! `autokernel bench`: judge kernel.py files (every correctness stage, then timing) on one
//! warm worker and print a stage table or one JSON object per file.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use autokernel_bench::{PyWorkerBenchmarker, WorkerOptions, WorkerProgram};
use autokernel_core::{
    BenchRequest, BenchResult, Benchmarker, Correctness, DType, Device, KernelKind, Layout, Params,
    Shape, Stage,
};
use serde_json::json;

use crate::global_args::GlobalArgs;

const EXAMPLES: &str = "Examples:
  autokernel bench kernel.py                      all stages, then timing on the GPU
  autokernel bench kernel.py --device cpu --quick a quick look with Triton's interpreter
  autokernel bench kernel.py --shape 4096,4096 --dtype float16 --json
  autokernel bench a.py b.py c.py --json          three candidates on one warm worker (JSON lines)
  autokernel bench rmsnorm.py --shape 4096,4096 --shape 8192,8192 --dtype float16 --compile
  autokernel bench --problem examples/problems/01_relu.py relu_new.py --compile --json
                                                  a ModelNew on a KernelBench-format problem

Exit codes: 0 the verdict is PASS; 1 any other verdict (FAIL, TIMEOUT, CRASH, TAMPER);
2 usage or environment error (missing file, unusable python).";

/// Arguments of `autokernel bench`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct BenchArgs {
    /// The kernel.py files to judge (each defines KERNEL_KIND and kernel_fn; with
    /// --problem, `class ModelNew`), one after another on the same warm worker
    #[arg(required = true, value_name = "PATH")]
    pub paths: Vec<PathBuf>,
    /// Judge the files on a problem in KernelBench's format instead of a kind: a Python
    /// file with `class Model(nn.Module)`, `get_inputs()` and `get_init_inputs()`; each
    /// kernel file defines `class ModelNew` with the same constructor (docs/problems.md).
    /// Five seeds and the problem at shrunk sizes, KernelBench's tolerances, timed against
    /// Model eager (and torch.compile with --compile); --quick: one seed, 10 timed trials
    #[arg(long, value_name = "PROBLEM.py", help_heading = "Bench")]
    pub problem: Option<PathBuf>,
    /// Where to run: auto (CUDA when available), cuda, or cpu (Triton's interpreter; timings
    /// are then not representative)
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|cuda|cpu",
        env = "AUTOKERNEL_DEVICE",
        help_heading = "Bench"
    )]
    pub device: Device,
    /// Fewer shapes, dtypes and repetitions: the first shape and dtype, the stability modes
    /// `large` and `zeros` at the first and the timed shape (and `masked` at the timed
    /// shape), the first edge shape
    #[arg(long, help_heading = "Bench")]
    pub quick: bool,
    /// A problem shape to add to the sweep and to time, e.g. 4096,4096 (dims of the kind:
    /// matmul M,N,K; softmax rows,cols; ...). Repeat it to judge and time each file at
    /// several shapes, one evaluation (and one output) per file and shape
    #[arg(long = "shape", value_name = "DIMS", help_heading = "Bench")]
    pub shapes: Vec<Shape>,
    /// The dtype to judge and time in: every stage then runs in this dtype only (default:
    /// every dtype of the kind; timing in float16 on a GPU, float32 on the CPU)
    #[arg(long, value_name = "float16|bfloat16|float32", help_heading = "Bench")]
    pub dtype: Option<DType>,
    /// Judge the file only if it is this kind: its KERNEL_KIND must name it (matmul, softmax,
    /// layernorm, rmsnorm, flash_attention, fused_mlp, cross_entropy, rotary_embedding or
    /// reduce); another kind is a FAIL at load
    #[arg(long, value_name = "KIND", help_heading = "Bench")]
    pub kind: Option<KernelKind>,
    /// Also time torch.compile of the reference
    #[arg(long, help_heading = "Bench")]
    pub compile: bool,
    /// How the inputs sit in memory: contiguous, or b_transposed (matmul's B as the
    /// transpose of a contiguous [N, K] tensor, as nn.Linear hands its weight over; the
    /// layout `run` uses for a target planned from nn.Linear). Other kinds ignore it
    #[arg(
        long,
        default_value = "contiguous",
        value_name = "contiguous|b_transposed",
        help_heading = "Bench"
    )]
    pub layout: Layout,
    /// A semantic parameter of the kind, NAME=VALUE (e.g. eps=1e-5, bias=false,
    /// cast_order=llama; docs/kernels.md lists each kind's), handed to the reference, the
    /// input generator and kernel_fn as a keyword argument. Repeatable; unset ones take
    /// the kind's defaults
    #[arg(
        long = "param",
        value_name = "NAME=VALUE",
        value_parser = autokernel_core::parse_param,
        help_heading = "Bench"
    )]
    pub params: Vec<(String, serde_json::Value)>,
    /// The Python interpreter whose environment (torch, triton) the worker adopts: a path,
    /// or a command name on PATH [default: $AUTOKERNEL_PYTHON, $VIRTUAL_ENV, python3]
    #[arg(long, value_name = "PATH|NAME", help_heading = "Bench")]
    pub python: Option<PathBuf>,
    /// Time limit of each evaluation (one file at one shape), in seconds; the worker is killed
    /// after it. A kernel that hangs while loading or in smoke is not waited for again at its
    /// other shapes
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 600,
        help_heading = "Bench"
    )]
    pub timeout: u64,
    /// Print one JSON object per file instead of the stage table (pretty for one file, one
    /// line each for several)
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// Runs `autokernel bench`: exit 0 on PASS, 1 on any other verdict, 2 (an `Err`) when the
/// file is missing or the environment cannot run the worker.
pub async fn run(args: BenchArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    if args.timeout == 0 {
        anyhow::bail!(
            "--timeout 0 would time out every evaluation; pass a limit in seconds, e.g. 600"
        );
    }
    if let Some(problem) = &args.problem {
        if problem.is_dir() {
            anyhow::bail!(
                "--problem `{}` is a folder; it takes one problem file. To judge a folder of \
                 problems, `autokernel score --problems {} --candidates DIR`",
                problem.display(),
                problem.display()
            );
        }
        if args.kind.is_some()
            || !args.params.is_empty()
            || !args.shapes.is_empty()
            || args.dtype.is_some()
            || args.layout != Layout::Contiguous
        {
            anyhow::bail!(
                "--kind, --param, --shape, --dtype and --layout are a kind's; a problem has its \
                 own inputs (its get_inputs(), judged in float32 as KernelBench does), so pass \
                 --problem without them"
            );
        }
        if let Some(missing) = args.paths.iter().find(|p| !p.exists()) {
            anyhow::bail!(
                "kernel file `{}` not found\nhint: a problem's candidate is a Python file with \
                 `class ModelNew(nn.Module)`, built like the problem's Model (docs/problems.md; \
                 tests/problems/01_relu/correct.py is one)",
                missing.display()
            );
        }
    }
    if let Some(dir) = args.paths.iter().find(|p| p.is_dir()) {
        anyhow::bail!(
            "`{}` is a folder; bench takes kernel.py files, e.g. `autokernel bench {}/kernel.py`",
            dir.display(),
            dir.display()
        );
    }
    if let Some(missing) = args.paths.iter().find(|p| !p.is_file()) {
        anyhow::bail!(
            "kernel file `{}` not found\nhint: `autokernel new-kernel softmax -o {}` writes a starter",
            missing.display(),
            missing.display()
        );
    }
    // a name given twice, or wrong for --kind, stops before the worker starts
    collect_params(&args.params, args.kind)?;
    let options = WorkerOptions {
        // the interpreter is chosen (and a missing one refused) before any work
        python: Some(autokernel_bench::resolve_python(args.python.as_deref())?),
        program: WorkerProgram::default(),
        device: args.device,
        gpu_bandwidth_gb_s: None,
    };
    let bench = PyWorkerBenchmarker::new(options);
    if let Some(problem) = &args.problem {
        let worker = bench.worker();
        let options = crate::commands::bench_problem::ProblemBench {
            paths: &args.paths,
            device: args.device,
            quick: args.quick,
            compile: args.compile,
            timeout: args.timeout,
            json: args.json,
        };
        let judged = crate::commands::bench_problem::run(&options, problem, worker);
        let code = tokio::select! {
            r = judged => r,
            signal = crate::commands::experiments::stop_signal() => {
                worker.shutdown().await;
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("\n{signal}: stopped; the candidate in flight and those after it were not judged");
                }
                return Ok(ExitCode::from(130));
            }
        };
        worker.shutdown().await;
        return code;
    }
    // one evaluation per file and --shape (per file when no shape is given)
    let shapes: Vec<Option<&Shape>> = if args.shapes.is_empty() {
        vec![None]
    } else {
        args.shapes.iter().map(Some).collect()
    };
    let several = args.paths.len() * shapes.len() > 1;
    let judged = judge_all(&args, &bench, &shapes, several);
    let all_passed = tokio::select! {
        r = judged => r?,
        signal = crate::commands::experiments::stop_signal() => {
            bench.worker().shutdown().await;
            #[allow(clippy::print_stderr)]
            {
                eprintln!("\n{signal}: stopped; the evaluation in flight and those after it were not judged");
            }
            return Ok(ExitCode::from(130));
        }
    };
    bench.worker().shutdown().await;
    Ok(if all_passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Judges every file at every shape on `bench`'s worker, printing each result as it comes;
/// returns whether all passed.
async fn judge_all(
    args: &BenchArgs,
    bench: &PyWorkerBenchmarker,
    shapes: &[Option<&Shape>],
    several: bool,
) -> anyhow::Result<bool> {
    let mut all_passed = true;
    for path in &args.paths {
        // a kernel that hung while loading or in smoke, which are the same at every shape
        let mut hung_in_smoke: Option<BenchResult> = None;
        for shape in shapes {
            if let Some(earlier) = &hung_in_smoke {
                // it would hang again: its verdict is repeated, not waited for again
                let again = not_run_again(earlier, *shape);
                print_result(args, path, &again, 0.0, several)?;
                continue;
            }
            let started = Instant::now();
            let result = match bench.bench(&request(args, path, *shape)).await {
                Ok(r) => r,
                Err(e) => {
                    return Err(
                        anyhow::Error::new(e).context(format!("cannot bench `{}`", path.display()))
                    )
                }
            };
            let turnaround_s = started.elapsed().as_secs_f64();
            all_passed &= result.correctness.is_pass();
            print_result(args, path, &result, turnaround_s, several)?;
            let smoke_hung = matches!(result.correctness, Correctness::Timeout { .. })
                && result.stages.iter().all(|s| s.stage == Stage::Load);
            if smoke_hung {
                hung_in_smoke = Some(result);
            }
        }
    }
    Ok(all_passed)
}

/// The TIMEOUT of a kernel that hung while loading or in the smoke stage (both the same at
/// every shape), repeated for `shape` without running it again: one more wait of
/// `--timeout` would end the same way.
fn not_run_again(earlier: &BenchResult, shape: Option<&Shape>) -> BenchResult {
    let at = shape.map_or_else(|| "this shape".to_string(), |s| s.to_string());
    let reason = format!(
        "not run again at {at}: the kernel hung while loading or in the smoke stage, which are the same at every shape ({})",
        earlier.correctness.reason().unwrap_or_default()
    );
    BenchResult {
        correctness: Correctness::Timeout { reason },
        ..earlier.clone()
    }
}

/// The request for one file: every stage, timed at `shape` in `--dtype` when both are given.
fn request(args: &BenchArgs, path: &Path, shape: Option<&Shape>) -> BenchRequest {
    let mut request = BenchRequest::new(path);
    request.kind = args.kind;
    request.device = args.device;
    request.quick = args.quick;
    request.time_compiled = args.compile;
    request.layout = args.layout;
    request.params = args.params.iter().cloned().collect();
    request.timeout = Duration::from_secs(args.timeout);
    if let Some(dtype) = args.dtype {
        // a kernel for one dtype is judged (and timed) in that dtype only
        request.dtypes = vec![dtype];
    }
    if let Some(shape) = shape {
        request.extra_shapes.push(shape.clone());
        if let Some(dtype) = args.dtype {
            request.timing = Some((shape.clone(), dtype));
        }
    }
    request
}

/// Prints one evaluation: a JSON object (one line each when `several`) or the stage table.
fn print_result(
    args: &BenchArgs,
    path: &Path,
    result: &BenchResult,
    turnaround_s: f64,
    several: bool,
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut v = to_json(result, &args.params.iter().cloned().collect());
        v["path"] = json!(path.display().to_string());
        v["turnaround_s"] = json!(turnaround_s);
        crate::output::write_json(&mut out, &v, several)?;
    } else {
        write!(out, "{}", table(path, result))?;
        writeln!(out, "turnaround_s: {turnaround_s:.2}")?;
        if several {
            writeln!(out)?;
        }
    }
    out.flush()?;
    Ok(())
}

/// `--param` flags as [`Params`], each name once; checked against `kind`'s parameters
/// when the kind is known before the file is read (`--kind`; else the worker checks them
/// against the file's KERNEL_KIND).
///
/// # Errors
/// A name given twice, or a name or value the kind does not accept.
pub(crate) fn collect_params(
    given: &[(String, serde_json::Value)],
    kind: Option<KernelKind>,
) -> anyhow::Result<Params> {
    let mut params = Params::new();
    for (name, value) in given {
        if params.insert(name.clone(), value.clone()).is_some() {
            anyhow::bail!("--param {name} is given twice; pass each parameter once");
        }
    }
    if let Some(kind) = kind {
        kind.spec()
            .resolve_params(&params)
            .map_err(|e| anyhow::anyhow!("--param: {e}"))?;
    }
    Ok(params)
}

/// The JSON object of `bench --json`: the contract's keys (nulls where absent) plus `shape`,
/// `dtype`, `params` (every parameter of the kind the kernel was judged with, defaults
/// filled; `{}` for a kind without any), `compiled_latency_us` and `config_keys_read` (the
/// `CONFIG` keys `kernel_fn` read at the timed shape,
/// [`autokernel_core::Metrics::config_keys_read`]), `gpu_conditions` (what the GPU was doing
/// while it was timed, [`autokernel_core::GpuConditions`]; null on the CPU); `run` adds `path` and `turnaround_s`,
/// the wall time of the evaluation in seconds as the caller saw it).
fn to_json(r: &BenchResult, params: &Params) -> serde_json::Value {
    // the worker accepted these for the file's kind, so they resolve; the given ones else
    let params = r
        .kind
        .and_then(|k| k.spec().resolve_params(params).ok())
        .unwrap_or_else(|| params.clone());
    let m = r.metrics.as_ref();
    let on_gpu = r.device.starts_with("cuda");
    json!({
        "kind": r.kind.map(KernelKind::name),
        "correctness": r.correctness.label(),
        "failed_stage": r.failed_stage().map(|s| s.name()),
        "reason": r.correctness.reason(),
        "stages": r.stages,
        "latency_us": m.map(|m| m.latency_us),
        "reference_latency_us": m.map(|m| m.reference_latency_us),
        "speedup_vs_reference": m.map(|m| m.speedup_vs_reference),
        "throughput": m.map(|m| m.throughput),
        "throughput_unit": m.map(|m| m.throughput_unit.clone()),
        "pct_peak": m.and_then(|m| m.pct_peak),
        "peak_vram_mb": m.filter(|_| on_gpu).map(|m| m.peak_vram_mb),
        "device": r.device,
        "timing_representative": r.timing_representative,
        "source_sha256": r.source_sha256,
        "shape": m.map(|m| m.shape.to_string()),
        "dtype": m.map(|m| m.dtype.name()),
        "params": params,
        "compiled_latency_us": m.and_then(|m| m.compiled_latency_us),
        "config_keys_read": m.and_then(|m| m.config_keys_read.clone()),
        "gpu_conditions": m.and_then(|m| m.conditions.clone()),
        "samples_us": m.map(|m| m.samples_us.clone()),
        "reference_samples_us": m.map(|m| m.reference_samples_us.clone()),
    })
}

/// The readable report: a stage table, then `key: value` lines with units in the keys.
fn table(path: &std::path::Path, r: &BenchResult) -> String {
    use std::fmt::Write as _;
    let mut s = String::new();
    match r.kind {
        Some(kind) => writeln!(s, "kernel: {} ({kind})", path.display()),
        None => writeln!(s, "kernel: {}", path.display()),
    }
    .ok();
    let _ = writeln!(
        s,
        "device: {}{}",
        r.device,
        if r.timing_representative {
            ""
        } else {
            " (Triton interpreter: correctness is real, timings are not representative)"
        }
    );
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{:<12} {:<6} {:>5} {:>8}  detail",
        "stage", "result", "cases", "time_s"
    );
    for st in &r.stages {
        let detail: String = st
            .detail
            .lines()
            .next()
            .unwrap_or_default()
            .chars()
            .take(160)
            .collect();
        let _ = writeln!(
            s,
            "{:<12} {:<6} {:>5} {:>8.2}  {}",
            st.stage.name(),
            if st.passed { "ok" } else { "FAIL" },
            st.cases,
            st.duration_s,
            detail
        );
    }
    let _ = writeln!(s, "---");
    let _ = writeln!(s, "correctness: {}", r.correctness.label());
    if let Some(stage) = r.failed_stage() {
        let _ = writeln!(s, "failed_stage: {stage}");
    }
    if let Some(reason) = r.correctness.reason() {
        let _ = writeln!(s, "reason: {reason}");
    }
    if let Some(m) = &r.metrics {
        let _ = writeln!(s, "timed_at: {} {}", m.dtype, m.shape);
        let _ = writeln!(s, "latency_us: {:.2}", m.latency_us);
        let _ = writeln!(s, "reference_latency_us: {:.2}", m.reference_latency_us);
        if let Some(c) = m.compiled_latency_us {
            let _ = writeln!(s, "compiled_latency_us: {c:.2}");
        }
        let _ = writeln!(s, "speedup_vs_reference: {:.3}", m.speedup_vs_reference);
        if m.samples_us.len() > 1 {
            let list = |v: &[f64]| {
                v.iter()
                    .map(|x| format!("{x:.2}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let _ = writeln!(s, "samples_us: {}", list(&m.samples_us));
            let _ = writeln!(s, "reference_samples_us: {}", list(&m.reference_samples_us));
        }
        let _ = writeln!(s, "throughput: {:.2} {}", m.throughput, m.throughput_unit);
        if let Some(p) = m.pct_peak {
            let _ = writeln!(s, "pct_peak: {p:.1}");
        }
        if r.timing_representative {
            let _ = writeln!(s, "peak_vram_mb: {:.1}", m.peak_vram_mb);
        }
        if let Some(keys) = &m.config_keys_read {
            let _ = writeln!(s, "config_keys_read: {}", keys.join(" "));
        }
        if let Some(c) = &m.conditions {
            let _ = writeln!(s, "gpu: {}", c.to_line());
        }
    }
    let _ = writeln!(s, "source_sha256: {}", r.source_sha256);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use autokernel_core::{Correctness, Stage, StageReport};

    fn failed() -> BenchResult {
        BenchResult {
            kind: Some(KernelKind::Softmax),
            correctness: Correctness::Fail {
                stage: Stage::Edge,
                reason: "masking bug".into(),
            },
            stages: vec![StageReport {
                stage: Stage::Load,
                passed: true,
                cases: 1,
                detail: "ok".into(),
                duration_s: 0.0,
            }],
            metrics: None,
            device: "cpu".into(),
            timing_representative: false,
            source_sha256: "ab".into(),
        }
    }

    #[test]
    fn json_has_exactly_the_contract_keys_with_nulls_where_absent() {
        let v = to_json(&failed(), &Params::new());
        for key in "kind correctness failed_stage reason stages latency_us reference_latency_us speedup_vs_reference throughput throughput_unit pct_peak peak_vram_mb device timing_representative source_sha256".split(' ') {
            assert!(v.get(key).is_some(), "missing {key}");
        }
        assert_eq!(v["correctness"], "FAIL");
        assert_eq!(v["failed_stage"], "edge");
        assert_eq!(v["reason"], "masking bug");
        assert!(v["latency_us"].is_null());
        assert!(v["peak_vram_mb"].is_null());
    }

    #[test]
    fn the_table_ends_with_greppable_summary_lines() {
        let t = table(std::path::Path::new("k.py"), &failed());
        assert!(t.contains("\ncorrectness: FAIL\n"), "{t}");
        assert!(t.contains("\nfailed_stage: edge\n"), "{t}");
        assert!(t.contains("load         ok"), "{t}");
    }

    #[test]
    fn a_timed_result_reports_the_config_keys_read_in_json_and_table() {
        let mut r = failed();
        r.correctness = Correctness::Pass;
        r.metrics = Some(autokernel_core::Metrics {
            shape: autokernel_core::Shape(vec![8, 128]),
            dtype: autokernel_core::DType::Float32,
            latency_us: 10.0,
            reference_latency_us: 20.0,
            compiled_latency_us: None,
            speedup_vs_reference: 2.0,
            samples_us: Vec::new(),
            reference_samples_us: Vec::new(),
            throughput: 1.0,
            throughput_unit: "GB/s".into(),
            pct_peak: None,
            peak_vram_mb: 0.0,
            config_keys_read: Some(vec!["BLOCK_ROWS".into(), "num_warps".into()]),
            conditions: None,
        });
        assert_eq!(
            to_json(&r, &Params::new())["config_keys_read"],
            json!(["BLOCK_ROWS", "num_warps"])
        );
        let t = table(std::path::Path::new("k.py"), &r);
        assert!(
            t.contains("\nconfig_keys_read: BLOCK_ROWS num_warps\n"),
            "{t}"
        );
        assert!(to_json(&failed(), &Params::new())["config_keys_read"].is_null());
    }
}
