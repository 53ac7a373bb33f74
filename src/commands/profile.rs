//! `autokernel profile`: profile a model (or import a torch.profiler trace) and print the
//! ranked plan: where device time goes, per op, with the Amdahl ceiling of each.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use autokernel_bench::{Worker, WorkerOptions};
use autokernel_core::{DType, Device, KernelKind};
use autokernel_profiler::{
    import_trace, not_planned_call_sites, not_planned_call_sites_text, plan, plan_for_model,
    unpluggable_ops, ChromeTraceProfiler, ImportedTrace, DEFAULT_WARMUP,
};

use crate::global_args::GlobalArgs;
use crate::model_args::ModelArgs;

const EXAMPLES: &str = "Examples:
  autokernel profile --example tiny --device cpu
  autokernel profile --example tiny --device cpu --iterations 20   (steadier CPU timings)
  autokernel profile --example gpt2 --input-shape 1,1024 --dtype bfloat16
  autokernel profile --model model.py --class Net --input-shape 8,512 -o trace.json
  autokernel profile --model transformers:GPT2LMHeadModel --model-kwargs '{\"n_layer\": 2}' --input-shape 1,128
  autokernel profile --model transformers:T5ForConditionalGeneration --input input_ids=1,64 --input decoder_input_ids=1,16
  autokernel profile --model transformers:GPT2LMHeadModel --pretrained ./gpt2-checkpoint --input-shape 1,1024
  autokernel profile --model transformers:ViTModel --inputs inputs.py:make_inputs   (returns (args, kwargs))
  autokernel profile --import trace.json.gz --json";

/// Arguments of `autokernel profile`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = EXAMPLES)]
pub struct ProfileArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Import an existing torch.profiler Chrome trace (.json or .json.gz) instead of
    /// running a model
    #[arg(long = "import", value_name = "TRACE", help_heading = "Model", conflicts_with_all = ["model", "example", "iterations"])]
    pub import: Option<PathBuf>,
    /// Where to run the model: auto (CUDA when available), cuda, or cpu (then CPU self
    /// times are ranked, and said so)
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|cuda|cpu",
        help_heading = "Model"
    )]
    pub device: String,
    /// Python interpreter whose torch runs the model: a path, or a command name on PATH
    /// [env: AUTOKERNEL_PYTHON, else $VIRTUAL_ENV/bin/python, else python3]
    #[arg(long, value_name = "PATH|NAME", help_heading = "Model")]
    pub python: Option<PathBuf>,
    /// Where to write the Chrome trace of the model run
    #[arg(
        short = 'o',
        long = "output",
        value_name = "TRACE",
        default_value = "autokernel-workspace/profiles/trace.json",
        help_heading = "Output"
    )]
    pub output: PathBuf,
    /// Print JSON (device, total_device_time_us, coverage, warnings, ops) instead of a table
    #[arg(long, help_heading = "Output")]
    pub json: bool,
    /// Show the N ops with the most device time (0: all) [default: 20 in the table, all in JSON]
    #[arg(long, value_name = "N", help_heading = "Output")]
    pub top: Option<usize>,
}

/// Runs `autokernel profile`.
pub async fn run(args: ProfileArgs, _global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let device: Device = args.device.parse().map_err(anyhow::Error::msg)?;
    let (imported, dtype, run) = match &args.import {
        Some(trace) => {
            let imported = import_trace(trace)?;
            if imported.report.ops.is_empty() {
                anyhow::bail!(
                    "`{}` holds no operator or kernel events: nothing to rank\nhint: record it with `torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True)` around a few forward passes, then `prof.export_chrome_trace(path)`",
                    trace.display()
                );
            }
            // the dtype the model ran in: that of the top op that recorded one
            let dtype = imported
                .ranked
                .iter()
                .find_map(|r| r.dtype)
                .unwrap_or(DType::Float16);
            (imported, dtype, None)
        }
        None => {
            let spec = args.model.spec(device)?;
            let python = autokernel_bench::resolve_python(args.python.as_deref())?;
            let mut options = WorkerOptions::new(device);
            options.python = Some(python);
            let profiler = ChromeTraceProfiler::new(Arc::new(Worker::new(options)))
                .with_dtype_is_default(args.model.dtype.is_none())
                .with_iterations(DEFAULT_WARMUP, args.model.iterations);
            let (imported, run) = profiler
                .profile_imported(&spec, &args.output)
                .await
                .context("profiling failed")?;
            let dtype = run["dtype"]
                .as_str()
                .and_then(|d| d.parse().ok())
                .unwrap_or(spec.dtype);
            (imported, dtype, Some(run))
        }
    };
    print(&args, &imported, dtype, run.as_ref())?;
    Ok(ExitCode::SUCCESS)
}

/// Writes data to stdout; a closed pipe (`| head`) is not an error.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
            Err(e).context("cannot write to stdout")
        }
        _ => Ok(()),
    }
}

#[allow(clippy::print_stderr)]
fn print(
    args: &ProfileArgs,
    imported: &ImportedTrace,
    dtype: DType,
    run: Option<&serde_json::Value>,
) -> anyhow::Result<()> {
    use std::fmt::Write;
    // a profiled model gets the plan `run` would make (kinds with a call site to plug a
    // kernel into); an imported trace, every classified op (for `bench` and `tune`)
    let targets = match run {
        Some(_) => plan_for_model(&imported.report, 5, dtype),
        None => plan(&imported.report, 5, dtype),
    };
    if args.json {
        let mut v = imported.to_json(args.top.unwrap_or(0));
        v["targets"] = serde_json::to_value(&targets)?;
        // what the plan leaves out for want of a kind (a grouped matmul, a MoE router)
        v["no_kind"] = autokernel_profiler::no_kind_ops(&imported.report)
            .iter()
            .map(|(op, why, f)| serde_json::json!({ "op": op, "reason": why, "fraction": f }))
            .collect();
        if let Some(r) = run {
            v["run"] = r.clone();
        }
        return emit(&(serde_json::to_string_pretty(&v)? + "\n"));
    }
    for w in &imported.report.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(r) = run {
        eprintln!(
            "profiled {} ({} parameters) on {}, inputs {}, {}, {} forward passes{}, trace: {}",
            r["model_class"].as_str().unwrap_or("?"),
            r["parameters"],
            r["device_name"].as_str().unwrap_or("?"),
            r["inputs"].as_str().unwrap_or("?"),
            r["dtype"].as_str().unwrap_or("?"),
            r["iterations"],
            launches_text(r),
            r["trace_path"].as_str().unwrap_or("?"),
        );
    }
    let mut text = imported.table(args.top.unwrap_or(20));
    if !targets.is_empty() {
        writeln!(
            text,
            "targets (top {} classified ops, {dtype}; on a known GPU, by the share of the model's time they can save):",
            targets.len()
        )?;
        for t in &targets {
            let shapes: Vec<String> = t
                .shapes
                .iter()
                .map(|s| {
                    let dims: Vec<String> = t
                        .kind
                        .dim_names()
                        .iter()
                        .zip(&s.0)
                        .map(|(n, v)| format!("{n}={v}"))
                        .collect();
                    dims.join(" ")
                })
                .collect();
            let params = if t.params.is_empty() {
                String::new()
            } else {
                format!("  ({})", autokernel_core::params_label(&t.params))
            };
            writeln!(
                text,
                "  {:<20} {:>5.1}%  {:<24} {}{params}",
                t.id,
                t.fraction * 100.0,
                t.op,
                if shapes.is_empty() {
                    "(shape unknown)".to_string()
                } else {
                    shapes.join("; ")
                }
            )?;
            if let Some(saving) = t.saving_label() {
                writeln!(text, "  {:<20} {saving}", "")?;
            }
        }
        let skipped = unpluggable_ops(&imported.report);
        if run.is_some() && !skipped.is_empty() {
            let list: Vec<String> = skipped
                .iter()
                .map(|(op, kind, f)| format!("{op} ({kind}, {:.1}%)", f * 100.0))
                .collect();
            writeln!(
                text,
                "not planned, no standard call site to plug a kernel into: {}",
                list.join(", ")
            )?;
        }
        if let Some(line) = autokernel_profiler::no_kind_ops_text(&imported.report) {
            writeln!(text, "{line}")?;
        }
        if run.is_some() {
            let sites = not_planned_call_sites(&imported.report, dtype);
            if let Some(sites) = not_planned_call_sites_text(&sites) {
                writeln!(text, "{sites}")?;
            }
        }
    } else if imported.report.ops.iter().all(|o| o.kind.is_none()) {
        writeln!(
            text,
            "no op maps to a kernel kind autokernel optimises ({})",
            KernelKind::ALL.map(KernelKind::name).join(", ")
        )?;
    }
    emit(&text)
}

/// `, N kernel launches per forward` from a profiled run's `launches_per_forward` (a GPU
/// profile's kernels over its forward passes); empty on the CPU, which launches none.
fn launches_text(run: &serde_json::Value) -> String {
    run["launches_per_forward"]
        .as_f64()
        .map_or(String::new(), |n| {
            format!(", {n:.0} kernel launches per forward")
        })
}

#[cfg(test)]
mod tests {
    use super::launches_text;

    #[test]
    fn the_profiled_line_names_launches_per_forward_on_a_gpu_only() {
        let gpu = serde_json::json!({"launches_per_forward": 412.333});
        assert_eq!(launches_text(&gpu), ", 412 kernel launches per forward");
        let cpu = serde_json::json!({"launches_per_forward": null});
        assert_eq!(launches_text(&cpu), "");
        assert_eq!(launches_text(&serde_json::json!({})), "");
    }
}
