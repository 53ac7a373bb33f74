//! `autokernel tune`: the loop on one kernel file at the shapes given, without a model. The
//! tuner walks the file's `TUNABLES` (every configuration judged and timed on the warm
//! worker, kept only when faster), in a workspace of its own that resumes like `run`'s. The
//! file itself is left as it is; the best version is the workspace's `targets/<id>/kernel.py`
//! and, with `--output`, a copy.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use autokernel_core::{DType, Decision, KernelKind, Layout, Shape, Target};

use autokernel::experiments::Baselines;
use autokernel::settings::{self, refuse_bfloat16_on_cpu, AgentSettings};
use autokernel::workspace::{CreatedFolder, Workspace};
use autokernel::{report, services, SavedVerification};

use crate::commands::experiments::{exit_code, run_experiments, LoopArgs};
use crate::global_args::GlobalArgs;

/// Arguments of `autokernel tune`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "Examples:
  autokernel new-kernel softmax -o softmax.py
  autokernel tune softmax.py --shape 4096,50257 --dtype float16 --budget 10m -o best.py
  autokernel tune matmul.py --shape 1024,50257,768 --layout b_transposed -w tune-lm-head
  autokernel tune kernel.py --shape 64,1000 --device cpu --max-experiments 4   (exercise it on the CPU)

Every configuration is judged by every correctness stage and timed at the shapes (the first
one is timed); the keep rule is `run`'s. The CONFIG keys that kernel_fn read in the best's
timed call move first (`config_keys_read` in `autokernel bench --json`), then every key; a
resumed tune, whose best was timed in an earlier run, moves every key. Run the same command
again to resume; `git log` in the workspace lists the experiments, results.tsv measures
each one.")]
pub struct TuneArgs {
    /// The kernel.py to tune: it declares KERNEL_KIND, a one-line CONFIG and the TUNABLES
    /// the tuner may try (every starter does). It is not modified
    #[arg(value_name = "PATH")]
    pub path: PathBuf,
    /// A problem shape to tune at, e.g. 4096,50257 (dims of the kind: matmul M,N,K; softmax
    /// rows,cols; ...). Repeat it to judge each configuration at several shapes; the first
    /// is the one timed
    #[arg(long = "shape", value_name = "DIMS", required = true)]
    pub shapes: Vec<Shape>,
    /// The dtype to tune in [default: float16 on a GPU, float32 on the CPU]
    #[arg(long, value_name = "float16|bfloat16|float32")]
    pub dtype: Option<DType>,
    /// How the inputs sit in memory: contiguous, or b_transposed (matmul's B as nn.Linear
    /// hands its weight over)
    #[arg(
        long,
        default_value = "contiguous",
        value_name = "contiguous|b_transposed"
    )]
    pub layout: Layout,
    /// A semantic parameter of the kind, NAME=VALUE (e.g. eps=1e-5; docs/kernels.md lists
    /// each kind's), handed to the judge and to kernel_fn. Repeatable; unset ones take the
    /// kind's defaults
    #[arg(long = "param", value_name = "NAME=VALUE", value_parser = autokernel_core::parse_param)]
    pub params: Vec<(String, serde_json::Value)>,
    #[command(flatten)]
    pub experiments: LoopArgs,
    /// The workspace folder (a git repository: one commit per experiment)
    #[arg(
        long,
        short = 'w',
        default_value = "autokernel-tune",
        value_name = "DIR",
        help_heading = "Output"
    )]
    pub workspace: PathBuf,
    /// Also write the best version of the kernel to this file
    #[arg(long, short = 'o', value_name = "FILE", help_heading = "Output")]
    pub output: Option<PathBuf>,
    /// Overwrite -o's file when it exists (a resumed tuning overwrites its own without it)
    #[arg(long, help_heading = "Output")]
    pub force: bool,
    /// Print the summary as one JSON object on stdout (progress stays on stderr)
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// Runs `autokernel tune`: exit 0 when a configuration passed the judge, 1 when none did
/// (the file's own included), 2 on bad input, 130 when interrupted.
pub async fn run(args: TuneArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let loop_settings = args.experiments.settings();
    loop_settings.check()?;
    if let Some(dtype) = args.dtype {
        loop_settings.refuse_bfloat16_where_it_cannot_run(dtype)?;
    }
    let (source, kind) = checked_kernel(&args)?;
    if let Some(out) = &args.output {
        // a workspace with a plan is being resumed: -o holds its own earlier result
        let resuming = args.workspace.join("plan.json").is_file();
        check_output(out, &args.path, args.force || resuming)?;
    }
    // a signal before the loop's handler is installed still ends with exit 130 and a line
    let early_stop = crate::commands::experiments::exit_on_signal_until_the_loop();

    let mut created = CreatedFolder::new(&args.workspace);
    let mut ws = Workspace::open(&args.workspace)?;
    if let Some(model) = &ws.settings.model {
        bail!(
            "workspace `{}` belongs to the model {}; `tune` needs a workspace of its own\nhint: pass another -w",
            ws.root.display(),
            model.describe()
        );
    }
    let device = args.experiments.device;
    let agent = AgentSettings::tuner().agent(&ws)?;
    let run_tag = settings::run_tag(None, &ws, || {
        format!("tune-{kind}-{}", chrono::Utc::now().format("%Y%m%d-%H%M"))
    });
    let store = services::store(&ws, &run_tag)?;
    let (mut services, scripts) = loop_settings.services(&ws)?;
    let resolved_device = services.device_name(&scripts, device).await?;
    let on_gpu = resolved_device.starts_with("cuda");
    let dtype = args.dtype.unwrap_or(if on_gpu {
        DType::Float16
    } else {
        DType::Float32
    });
    // before the plan is saved: a folder this command created is removed again
    refuse_bfloat16_on_cpu(dtype, !on_gpu)?;
    if !on_gpu {
        warn_if_slow_on_cpu(
            kind,
            &args.shapes[0],
            dtype,
            args.experiments
                .bench_timeout
                .unwrap_or(settings::DEFAULT_BENCH_TIMEOUT_S),
        );
    }
    // where the target comes from (a model's target names the profiled op)
    let target = Target::new(format!("01-{kind}"), kind)
        .with_shapes(args.shapes.clone())
        .with_dtype(dtype)
        .with_op(format!("tune {}", args.path.display()))
        .with_layout(args.layout)
        .with_params(crate::commands::bench::collect_params(
            &args.params,
            Some(kind),
        )?);
    plan(&mut ws, &target, &args.path, &source, args.json)?;
    created.keep();
    ws.settings.tuned_kernel = Some(std::path::absolute(&args.path)?);
    ws.settings.run_tag = Some(run_tag);
    ws.save_settings()?;
    crate::output::print_info(
        args.json,
        &format!("tuning {} at {}", args.path.display(), describe(&target)),
    );

    let targets = vec![target.clone()];
    let baselines = Baselines {
        kernels: vec![(target.clone(), source)],
        from: Some(args.path.display().to_string()),
    };
    early_stop.abort();
    let (experiments, interrupt) = run_experiments(
        &args.experiments,
        &ws,
        &services,
        agent,
        store,
        baselines,
        global,
    )
    .await?;
    let rows = &experiments.rows;
    report::write(&ws, &targets, rows, &SavedVerification::None, &[])?;

    let best = ws.path(&format!("targets/{}/kernel.py", target.id));
    let anything_passed = rows.iter().any(|r| r.correctness.is_pass());
    if let Some(out) = args.output.as_ref().filter(|_| anything_passed) {
        std::fs::copy(&best, out)
            .with_context(|| format!("cannot write the best kernel to `{}`", out.display()))?;
    }
    let summaries = report::summarize(&targets, rows);
    let results = ws.path("results.tsv");
    let best = anything_passed.then_some(best.as_path());
    if args.json {
        let summary = serde_json::json!({
            "workspace": ws.root,
            "stop_reason": experiments.outcome.stop.label(),
            "configurations_measured": rows.len(),
            "kept": rows.iter().filter(|r| r.decision == Decision::Keep).count(),
            "best": best,
            "written_to": args.output.as_ref().filter(|_| best.is_some()),
            "timing_representative": resolved_device.starts_with("cuda"),
            "targets": summaries,
            "results": results,
        });
        crate::output::print_stdout(&serde_json::to_string_pretty(&summary)?);
        return Ok(exit_code(&experiments, &interrupt, "configuration"));
    }
    crate::output::print_stdout(&report::summary_table(&summaries));
    crate::output::print_stdout(&tune_summary(
        &experiments.outcome,
        rows,
        best,
        &results,
        &resolved_device,
        &args,
    ));
    Ok(exit_code(&experiments, &interrupt, "configuration"))
}

/// The kernel file's text and kind, once the tuner can read it and the shapes fit the kind.
fn checked_kernel(args: &TuneArgs) -> anyhow::Result<(String, KernelKind)> {
    let source = read_kernel(&args.path)?;
    // the judge reads the kind from the file itself, so the file must name it
    let Some(kind) = autokernel_bench::declared_kind(&source) else {
        bail!(
            "`{}` declares no KERNEL_KIND (a line such as KERNEL_KIND = \"softmax\")\nhint: add it; the judge reads the kind from the file",
            args.path.display()
        );
    };
    let how = "hint: a kernel to tune needs a one-line CONFIG dict and a TUNABLES dict of lists with two or more values, as in `autokernel new-kernel";
    match autokernel_core::pyliteral::TunableSource::parse(&source) {
        Err(e) => bail!(
            "the tuner cannot read `{}`: {e}\n{how} {kind}`",
            args.path.display()
        ),
        Ok(t) if t.tunables.iter().all(|(_, values)| values.len() < 2) => bail!(
            "`{}` has nothing to tune: no TUNABLES key lists two or more values\n{how} {kind}`",
            args.path.display()
        ),
        Ok(_) => {}
    }
    if args.layout != Layout::Contiguous && kind != KernelKind::Matmul {
        bail!(
            "--layout {} applies to matmul only; a {kind} kernel's inputs are contiguous",
            args.layout.name()
        );
    }
    for shape in &args.shapes {
        Shape::parse_for(kind, &shape.to_string()).map_err(|e| anyhow::anyhow!("--shape: {e}"))?;
    }
    Ok((source, kind))
}

/// `-o`'s file: in an existing folder, not a folder, not the kernel being tuned, and not an
/// existing file unless `overwrite` (found out now, not after the whole search).
fn check_output(out: &Path, kernel: &Path, overwrite: bool) -> anyhow::Result<()> {
    let folder = out.parent().filter(|p| !p.as_os_str().is_empty());
    if out.is_dir() || folder.is_some_and(|f| !f.is_dir()) {
        bail!(
            "-o `{}` is not a file in an existing folder\nhint: name a file, e.g. -o best.py",
            out.display()
        );
    }
    if out.exists() && std::fs::canonicalize(out)? == std::fs::canonicalize(kernel)? {
        bail!(
            "-o `{}` is the kernel being tuned, which tune never modifies\nhint: name another file, e.g. -o best.py",
            out.display()
        );
    }
    if out.exists() && !overwrite {
        bail!(
            "-o `{}` exists and tune would overwrite it\nhint: pass --force to overwrite it, or name another file",
            out.display()
        );
    }
    Ok(())
}

/// Saves the one-target plan in a new workspace; in one that has a plan, checks that it is
/// this problem and this file's text (resuming from an edited file's old text would
/// silently ignore the edit).
fn plan(
    ws: &mut Workspace,
    target: &Target,
    path: &Path,
    source: &str,
    json: bool,
) -> anyhow::Result<()> {
    let blob = autokernel_vcs::blob_id(source.as_bytes());
    let start_over = "hint: pass another -w, or delete that folder to start over";
    match ws.load_plan()? {
        Some(plan) if !same_problem(&plan, target) => bail!(
            "workspace `{}` tunes {}, not {}\n{start_over}",
            ws.root.display(),
            plan.first().map_or("nothing".into(), describe),
            describe(target)
        ),
        Some(_)
            if ws
                .settings
                .tuned_kernel_blob
                .as_ref()
                .is_some_and(|b| *b != blob) =>
        {
            let was = ws.settings.tuned_kernel.clone().unwrap_or_default();
            if std::path::absolute(path)? == was {
                bail!(
                    "`{}` has changed since workspace `{}` started tuning it\n{start_over}",
                    path.display(),
                    ws.root.display()
                )
            }
            bail!(
                "workspace `{}` tunes `{}`, whose text differs from `{}`\n{start_over}",
                ws.root.display(),
                was.display(),
                path.display()
            )
        }
        Some(_) => crate::output::print_info(
            json,
            &format!("resuming the tuning in `{}`", ws.root.display()),
        ),
        None => {
            ws.save_plan(std::slice::from_ref(target))?;
            ws.settings.tuned_kernel_blob = Some(blob);
        }
    }
    Ok(())
}

/// The kernel file's text, with errors that say what to do.
fn read_kernel(path: &Path) -> anyhow::Result<String> {
    if path.is_dir() {
        bail!(
            "`{}` is a folder; tune takes a kernel.py file",
            path.display()
        );
    }
    if !path.is_file() {
        bail!(
            "kernel file `{}` not found\nhint: `autokernel new-kernel softmax -o {}` writes a starter",
            path.display(),
            path.display()
        );
    }
    std::fs::read_to_string(path).with_context(|| format!("cannot read `{}`", path.display()))
}

/// Whether a saved plan is this target's problem (kind, shapes, dtype, layout, params).
fn same_problem(plan: &[Target], target: &Target) -> bool {
    matches!(plan, [p] if p.kind == target.kind && p.shapes == target.shapes
        && p.dtype == target.dtype && p.layout == target.layout && p.params == target.params)
}

/// `softmax 4096x50257 float16` (and the layout when not contiguous, the parameters when
/// set).
fn describe(t: &Target) -> String {
    let shapes: Vec<String> = t.shapes.iter().map(|s| s.to_string()).collect();
    let mut s = format!("{} {} {}", t.kind, shapes.join(" "), t.dtype);
    if t.layout != Layout::Contiguous {
        s.push_str(&format!(" {}", t.layout.name()));
    }
    if !t.params.is_empty() {
        s.push_str(&format!(" ({})", autokernel_core::params_label(&t.params)));
    }
    s
}

/// Bytes a problem may move (`KernelKind::min_bytes`) before its every evaluation in
/// Triton's interpreter takes minutes: the interpreter computes with numpy, one program at a
/// time. 16 MB is a softmax of 2048x1024 float32 (read and written); the `cpu` shapes move
/// a few KB.
const CPU_SLOW_BYTES: f64 = 16e6;

/// Warns, before any work, that a GPU-sized shape on the CPU will be slow, and names a
/// shape of the kind's `cpu` set instead (a `tune` at 4096x50257 in the interpreter ran past
/// its 600 s limit on the baseline alone).
fn warn_if_slow_on_cpu(kind: KernelKind, shape: &Shape, dtype: DType, timeout_s: u64) {
    if kind.min_bytes(shape, dtype) <= CPU_SLOW_BYTES {
        return;
    }
    let small = &kind.shapes(autokernel_core::ShapeSet::Cpu)[0];
    #[allow(clippy::print_stderr)]
    {
        eprintln!(
            "warning: {kind} {shape} on the CPU runs in Triton's interpreter: each configuration may take many minutes, up to --bench-timeout ({timeout_s} s), and --budget is checked only between configurations\nhint: on the CPU, tune at a small shape such as --shape {}",
            small.0.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
        );
    }
}

/// The lines after the table: why it stopped, what was measured, where the best kernel is.
fn tune_summary(
    outcome: &autokernel_core::LoopOutcome,
    rows: &[autokernel_core::ExperimentRecord],
    best: Option<&Path>,
    results: &Path,
    device: &str,
    args: &TuneArgs,
) -> String {
    let stop = outcome.stop.label();
    let kept = rows.iter().filter(|r| r.decision == Decision::Keep).count();
    let mut s = format!(
        "---\nstop_reason: {stop}\nconfigurations_measured: {}\nkept: {kept}\n",
        rows.len()
    );
    match best {
        Some(best) => {
            s.push_str(&format!("best: {}\n", best.display()));
            if let Some(out) = &args.output {
                s.push_str(&format!("written_to: {}\n", out.display()));
            }
        }
        None => {
            // name the baseline's verdict: a TIMEOUT is not a kernel the judge refused
            let baseline = rows
                .iter()
                .find(|r| r.decision == Decision::Baseline)
                .map(|r| format!(": the baseline's verdict was {}", r.correctness))
                .unwrap_or_default();
            s.push_str(&format!(
                "best: none (no configuration passed the judge{baseline}; nothing written)\n"
            ));
        }
    }
    if !device.starts_with("cuda") {
        s.push_str("timings: Triton's interpreter on the CPU, not representative\n");
    }
    s.push_str(&format!("results: {}", results.display()));
    s
}

#[cfg(test)]
mod tests {
    use autokernel_core::pyliteral::TunableSource;
    use autokernel_core::KernelKind;

    /// Every starter can be tuned as `new-kernel` writes it: a one-line CONFIG the tuner
    /// can rewrite, TUNABLES keys that are CONFIG keys, and something to tune (a
    /// multi-line CONFIG once made `autokernel tune` refuse the softmax starter).
    #[test]
    fn every_starter_is_readable_by_the_tuner() {
        for kind in KernelKind::ALL {
            let source = autokernel_bench::starter_source(kind);
            let parsed = TunableSource::parse(source)
                .unwrap_or_else(|e| panic!("{kind} starter: the tuner cannot read it: {e}"));
            assert!(
                parsed.tunables.iter().any(|(_, values)| values.len() >= 2),
                "{kind}: no TUNABLES key lists two or more values"
            );
            for (key, _) in &parsed.tunables {
                assert!(
                    parsed.config.iter().any(|(k, _)| k == key),
                    "{kind}: TUNABLES[{key}] is not a CONFIG key"
                );
            }
        }
    }
}
