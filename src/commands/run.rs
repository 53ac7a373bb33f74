//! `autokernel run`: the main job. Profile the model, plan targets, run the loop over each
//! target, verify the kept kernels in the model, and write the report. Running the same
//! command again on the same workspace resumes where it stopped.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{bail, Context};
use autokernel_core::{Agent, Device, StopReason};

use crate::cli::GlobalArgs;
use crate::commands::experiments::{
    refuse_bfloat16_on_cpu, run_experiments, Baselines, CreatedFolder, LoopArgs,
};
use crate::model_args::ModelArgs;
use crate::progress::spinner;
use crate::workspace::{ModelIdentity, Workspace};
use crate::{defaults, report};

/// Which agent proposes candidates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentChoice {
    /// Coordinate descent over each kernel's TUNABLES; needs no network
    Tune,
    /// An OpenAI-compatible chat-completions server (OpenAI, vLLM, Ollama, llama.cpp)
    Openai,
    /// The LLM proposes structure; the tuner refines each kept candidate's CONFIG
    Hybrid,
}

/// Arguments of `autokernel run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "Examples:
  autokernel run --example tiny --device cpu --max-experiments 6
  autokernel run --example gpt2 --agent tune --budget 20m
  autokernel run --model transformers:GPT2LMHeadModel --model-kwargs '{\"n_layer\": 12}' --input-shape 1,1024
  OPENAI_BASE_URL=http://127.0.0.1:8000/v1 autokernel run --example llama --agent openai --llm-model qwen3-coder

Ctrl-C or SIGTERM stops after the current experiment (or cuts the verification short) and
still writes the report, exit 130; a second one abandons the experiment in flight. Run the
same command again on the same workspace to resume (with the same --dtype, if one was
given); `autokernel report` and `autokernel verify` work on a workspace at any time.")]
pub struct RunArgs {
    #[command(flatten)]
    pub model: ModelArgs,
    /// Who proposes candidates
    #[arg(long, value_enum, default_value_t = AgentChoice::Tune, help_heading = "Agent")]
    pub agent: AgentChoice,
    /// Base URL of an OpenAI-compatible server (for --agent openai|hybrid)
    #[arg(
        long,
        env = "OPENAI_BASE_URL",
        value_name = "URL",
        help_heading = "Agent"
    )]
    pub llm_base_url: Option<String>,
    /// Model name on that server
    #[arg(
        long,
        env = "AUTOKERNEL_LLM_MODEL",
        value_name = "NAME",
        help_heading = "Agent"
    )]
    pub llm_model: Option<String>,
    #[command(flatten)]
    pub experiments: LoopArgs,
    /// Number of kernels from the plan to optimise [default: 5]
    #[arg(long, value_name = "N", help_heading = "Budget")]
    pub top: Option<usize>,
    /// The workspace folder (a git repository: one commit per experiment)
    #[arg(
        long,
        short = 'w',
        default_value = "autokernel-workspace",
        value_name = "DIR",
        help_heading = "Output"
    )]
    pub workspace: PathBuf,
    /// Branch name suffix: experiments go to the branch autokernel/TAG [default: date and model]
    #[arg(long, value_name = "TAG", help_heading = "Output")]
    pub run_tag: Option<String>,
    /// Skip the end-to-end verification after the loop (the last one is kept, and reads
    /// as stale once a kernel changed)
    #[arg(long, help_heading = "Output")]
    pub no_verify: bool,
    /// Print the summary as one JSON object on stdout (progress stays on stderr)
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// Runs `autokernel run`.
pub async fn run(args: RunArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    // flags first: a refused command leaves no workspace folder behind
    let device = args.experiments.device;
    let spec = args.model.spec(device)?;
    if args.top == Some(0) {
        bail!("--top 0 leaves nothing to optimise; pass --top 1 or more");
    }
    if args.experiments.max_experiments == Some(0) {
        bail!("--max-experiments 0 runs no experiment; pass 1 or more (`autokernel profile` shows the plan alone)");
    }
    args.experiments.check()?;
    args.experiments
        .refuse_bfloat16_where_it_cannot_run(spec.dtype)?;
    // a signal before the loop's handler is installed still ends with exit 130 and a line
    let early_stop = crate::commands::experiments::exit_on_signal_until_the_loop();
    // a folder this run creates is removed again if the run fails before it has a plan
    // (a model that does not load), instead of being left with a repository and a log
    let mut created = CreatedFolder::new(&args.workspace);
    let mut ws = Workspace::open(&args.workspace)?;
    let identity = ModelIdentity::of(&spec, args.model.dtype.is_some());
    if let Some(kernel) = &ws.settings.tuned_kernel {
        bail!(
            "workspace `{}` is `autokernel tune`'s, for `{}`, not a model's\nhint: pass another --workspace",
            ws.root.display(),
            kernel.display()
        );
    }
    if let Some(previous) = &ws.settings.model {
        if !previous.same_model(&identity) {
            bail!(
                "workspace `{}` belongs to another model ({}), not {}\nhint: pass a new --workspace, or delete that folder to start over",
                ws.root.display(),
                previous.describe(),
                identity.describe()
            );
        }
    }
    // a dtype given now must be the one the saved plan was made in (a first run that left
    // the dtype to its default recorded none, so the identity alone cannot tell)
    if let (Some(_), Some(planned)) = (&args.model.dtype, ws.load_plan()?) {
        if let Some(was) = planned
            .first()
            .map(|t| t.dtype)
            .filter(|d| *d != spec.dtype)
        {
            bail!(
                "workspace `{}` was planned and measured in {was}, not {}\nhint: resume without --dtype (or with --dtype {was}), or pass a new --workspace to start over in {}",
                ws.root.display(),
                spec.dtype,
                spec.dtype
            );
        }
    }
    // the agent is configured (and an LLM's settings checked) before any work is done
    let agent: Box<dyn Agent> = defaults::agent(
        args.agent,
        &ws,
        args.llm_base_url.clone(),
        args.llm_model.clone(),
    )?;
    let run_tag = args
        .run_tag
        .clone()
        .or_else(|| ws.settings.run_tag.clone())
        .unwrap_or_else(|| {
            format!(
                "{}-{}",
                chrono::Utc::now().format("%Y%m%d-%H%M"),
                identity.slug()
            )
        });
    // opening the store takes the workspace's owner lock: nothing is written before it
    let store = defaults::store(&ws, &run_tag)?;
    defaults::install_program_md(&ws)?;

    let (mut services, scripts) = args.experiments.services(&ws)?;
    // the device first: a dtype it cannot run is refused before a profile is taken
    let resolved_device = services.device_name(&scripts, device).await?;
    tracing::info!(device = %resolved_device, gpu = ?services.gpu_name, "bench device");
    let dtype = match ws.load_plan()? {
        Some(planned) => planned.first().map_or(spec.dtype, |t| t.dtype),
        None => spec.dtype,
    };
    refuse_bfloat16_on_cpu(dtype, !resolved_device.starts_with("cuda"))?;

    // 1. plan: reuse the saved one when resuming, else profile the model
    let targets = match ws.load_plan()? {
        Some(t) => {
            tracing::info!(targets = t.len(), "resuming with the saved plan");
            t
        }
        None => {
            let bar = spinner(global, &format!("profiling {}", identity.label()));
            let trace = ws.path("profiles/trace.json");
            std::fs::create_dir_all(ws.path("profiles"))?;
            let profiled = services
                .profile(
                    &spec,
                    args.model.dtype.is_none(),
                    args.model.iterations,
                    &scripts,
                    &trace,
                )
                .await;
            bar.finish_and_clear();
            let (imported, dtype) = profiled.context("profiling the model failed")?;
            if !global.quiet {
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("{}", imported.table(15));
                }
            }
            let top = args.top.or(ws.settings.top).unwrap_or(5);
            let t = autokernel_profiler::plan_for_model(&imported.report, top, dtype);
            let skipped = autokernel_profiler::unpluggable_ops(&imported.report);
            if !skipped.is_empty() && !global.quiet {
                let list: Vec<String> = skipped
                    .iter()
                    .map(|(op, kind, f)| format!("{op} ({kind}, {:.1}%)", f * 100.0))
                    .collect();
                #[allow(clippy::print_stderr)]
                {
                    eprintln!(
                        "not planned, no standard call site to plug a kernel into: {} (a kernel of your own for them can be tuned with `autokernel tune` and judged with `autokernel bench`)",
                        list.join(", ")
                    );
                }
            }
            if t.is_empty() {
                bail!("the profile has no kernel autokernel can optimise (no op classified as one of its nine kinds)");
            }
            ws.save_plan(&t)?;
            created.keep();
            t
        }
    };
    // the workspace belongs to this model once it has a plan for it (not before: a run that
    // failed to load the model must not lock the folder to it); a resumed run keeps the
    // model as first recorded, whatever this invocation left to defaults
    if ws.settings.model.is_none() {
        ws.settings.model = Some(identity.clone());
    }
    ws.settings.run_tag = Some(run_tag.clone());
    ws.settings.device = Some(
        match device {
            Device::Auto => "auto",
            Device::Cuda => "cuda",
            Device::Cpu => "cpu",
        }
        .to_string(),
    );
    ws.save_settings()?;
    crate::print_info(
        args.json,
        &format!(
            "plan: {} target(s): {}",
            targets.len(),
            targets
                .iter()
                .map(|t| t.id.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    );

    // 2–3. the loop
    let starters: Vec<_> = targets
        .iter()
        .map(|t| {
            (
                t.clone(),
                autokernel_bench::starter_source(t.kind).to_string(),
            )
        })
        .collect();
    let baselines = Baselines {
        kernels: starters,
        from: None,
    };
    // the last verification stays: once this run changes a kernel, the report marks it stale
    // (by the kernels' hashes), and a run that ends without verifying says so
    early_stop.abort();
    let experiments = run_experiments(
        &args.experiments,
        &ws,
        &services,
        agent,
        store,
        baselines,
        global,
    )
    .await?;
    let (outcome, rows) = (&experiments.outcome, &experiments.rows);

    // 4. verify, unless interrupted or asked not to
    let interrupted = outcome.stop == StopReason::Interrupted;
    let mut verified_now = None;
    let mut verify_interrupted = false;
    if !args.no_verify && !interrupted {
        let bar = spinner(global, "verifying the kept kernels inside the model");
        // a signal now (the loop is over, its handler still installed) cuts the
        // verification short and goes on to the report
        let v = tokio::select! {
            v = crate::commands::verify::verify_workspace(&mut services, &ws, &spec, &targets, rows,
                std::time::Duration::from_secs(crate::commands::verify::VERIFY_TIMEOUT_S)) => Some(v),
            () = experiments.interrupt.stopped() => None,
        };
        bar.finish_and_clear();
        match v {
            Some(Ok(v)) => {
                ws.save_verification(&v)?;
                verified_now = Some(v);
            }
            Some(Err(e)) => tracing::warn!("verification could not run: {e:#}"),
            None => verify_interrupted = true,
        }
    }

    // 5. report
    let saved = crate::report::SavedVerification::load(&ws);
    let stale = crate::report::stale_kernels(&ws, &targets, saved.get());
    crate::commands::report::write_report(&ws, &targets, rows, &saved, &stale)?;
    let summaries = report::summarize(&targets, rows);
    let on_gpu = resolved_device.starts_with("cuda");
    if args.json {
        let verification = match (&verified_now, verify_interrupted) {
            (Some(v), _) => {
                serde_json::json!({"state": if v.passed { "passed" } else { "failed" }, "result": v})
            }
            (None, true) => serde_json::json!({"state": "interrupted"}),
            (None, false) => serde_json::json!({"state": "not_run"}),
        };
        let summary = serde_json::json!({
            "workspace": ws.root,
            "stop_reason": outcome.stop.label(),
            "experiments": outcome.experiments,
            "projected_speedup": report::projected(&summaries),
            "timing_representative": on_gpu,
            "targets": summaries,
            "verification": verification,
            "kernels_plugged_in": verified_now.as_ref().map(|v| v.included.len()),
            "end_to_end_speedup": verified_now.as_ref().and_then(|v| v.speedup),
            "left_out": verified_now.as_ref().map(|v| &v.excluded),
            "report": ws.path("report.md"),
        });
        crate::print_stdout(&serde_json::to_string_pretty(&summary)?);
        return Ok(exit_code(
            experiments.exit_code("kernel"),
            verified_now.as_ref(),
        ));
    }
    crate::print_stdout(&report::summary_table(&summaries));
    let stop = outcome.stop.label();
    let mut summary = format!(
        "---\nstop_reason: {stop}\nexperiments: {}\nprojected_speedup: {:.3}\n",
        outcome.experiments,
        report::projected(&summaries)
    );
    if !on_gpu {
        // the CPU interpreter's latencies say nothing about speed; say so where they show
        summary.push_str("timings: Triton's interpreter on the CPU, not representative (the keep rule and the speedups above are only exercised, not meaningful)\n");
    }
    if verify_interrupted {
        summary.push_str("verified: not run (interrupted)\n");
    }
    if let Some(v) = &verified_now {
        summary.push_str(&format!("verified: {}\n", v.verdict()));
        if !v.included.is_empty() {
            summary.push_str(&format!(
                "kernels_plugged_in: {}\nend_to_end_speedup: {}\n",
                v.included.len(),
                v.speedup.map_or("n/a".into(), |s| format!("{s:.3}"))
            ));
        }
        // why each other kernel stayed out: not pluggable, breaks the model, or slower
        for e in &v.excluded {
            summary.push_str(&format!("left_out: {}: {}\n", e.target, e.reason));
        }
    }
    summary.push_str(&format!("report: {}\n", ws.path("report.md").display()));
    crate::print_stdout(&summary);
    Ok(exit_code(
        experiments.exit_code("kernel"),
        verified_now.as_ref(),
    ))
}

/// `run`'s exit code: the loop's ([`Experiments::exit_code`](crate::commands::experiments::Experiments::exit_code)),
/// except that a finished run whose verification found a kernel that breaks the model (or
/// the model with the kernels wrong) exits 1, as `autokernel verify` does on the same
/// workspace: a script that deploys on success must not take those kernels.
fn exit_code(loop_code: ExitCode, verified: Option<&report::Verification>) -> ExitCode {
    match verified {
        Some(v) if loop_code == ExitCode::SUCCESS && !v.passed => {
            tracing::error!(
                "the kept kernels failed the check inside the model: {} (report.md has each reason; `autokernel verify` checks again)",
                v.verdict()
            );
            ExitCode::from(1)
        }
        _ => loop_code,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verification(passed: bool) -> report::Verification {
        report::Verification {
            passed,
            ..Default::default()
        }
    }

    #[test]
    fn a_failed_verification_makes_a_finished_run_exit_1() {
        let failed = verification(false);
        let passed = verification(true);
        assert_eq!(
            exit_code(ExitCode::SUCCESS, Some(&failed)),
            ExitCode::from(1)
        );
        assert_eq!(
            exit_code(ExitCode::SUCCESS, Some(&passed)),
            ExitCode::SUCCESS
        );
        assert_eq!(exit_code(ExitCode::SUCCESS, None), ExitCode::SUCCESS);
        // the loop's own verdicts stand: nothing passed (1), interrupted (130)
        assert_eq!(
            exit_code(ExitCode::from(1), Some(&passed)),
            ExitCode::from(1)
        );
        assert_eq!(exit_code(ExitCode::from(130), None), ExitCode::from(130));
    }
}
