//! `autokernel run`: the main job. Profile the model, plan targets, run the loop over each
//! target, verify the kept kernels in the model, and write the report. Running the same
//! command again on the same workspace resumes where it stopped.

use std::path::PathBuf;
use std::process::ExitCode;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use anyhow::bail;
use autokernel::job::VerificationRun;
use autokernel::settings::{AgentChoice, AgentSettings};
use autokernel::{report, Job, Verification};
use autokernel_core::Interrupt;

use crate::commands::experiments::{spawn_signal_handler, LoopArgs};
use crate::global_args::GlobalArgs;
use crate::model_args::ModelArgs;
use crate::progress::{ProgressReporter, StepHooks};

/// Arguments of `autokernel run`.
#[derive(Debug, clap::Args)]
#[command(after_long_help = "Examples:
  autokernel run --example tiny --device cpu --max-experiments 6
  autokernel run --example gpt2 --agent tune --budget 20m
  autokernel run --model transformers:GPT2LMHeadModel --model-kwargs '{\"n_layer\": 12}' --input-shape 1,1024
  autokernel run --model transformers:T5ForConditionalGeneration --input input_ids=1,512 --input decoder_input_ids=1,128
  autokernel run --model transformers:LlamaForCausalLM --pretrained ./llama-checkpoint --input-shape 1,512
  OPENAI_BASE_URL=http://127.0.0.1:8000/v1 autokernel run --example llama --agent openai --llm-model qwen3-coder

--budget is the whole run's: the profile, the loop, the verification and the report end
within it. The verification's share (--verify-budget, by default a quarter of the budget,
at least 30s and at most 15m, never more than half) and 5s for the report are kept from
what the profile leaves; the loop gets the rest. A verification still running when its
share ends is cut short: verify.json keeps the kernels it decided, marked cut short.

Ctrl-C or SIGTERM stops after the current experiment (or cuts the verification short,
keeping what it decided) and still writes the report, exit 130; a second one abandons the experiment in flight. Run the
same command again on the same workspace to resume (with the same model, inputs, checkpoint
and --dtype, if one was given); `autokernel report` and `autokernel verify` work on a workspace at any time.")]
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
    /// How many targets to plan [default: 5]: on a GPU autokernel knows, the N that can
    /// save the most; elsewhere those of the N ops with the largest share, where an op
    /// whose call sites differ (a `Linear` class at four shapes) counts once and may give
    /// several targets
    #[arg(long, value_name = "N", help_heading = "Budget")]
    pub top: Option<usize>,
    /// The workspace folder (a git repository: one commit per experiment)
    #[arg(
        long,
        short = 'w',
        default_value = autokernel::workspace::DEFAULT_DIR,
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
    /// How long the verification after the loop may take, e.g. 2m, instead of its share
    /// of --budget (a quarter, at least 30 s and at most 15 m, never more than half);
    /// past it, it is cut short and keeps the kernels it decided [default: that share;
    /// without --budget, 30m]
    #[arg(long, value_name = "DURATION", value_parser = autokernel::settings::parse_duration, help_heading = "Budget")]
    pub verify_budget: Option<std::time::Duration>,
    /// Verify in every deploy mode the device has (eager, cudagraph, compile,
    /// reduce-overhead), not only the deploy mode and eager
    #[arg(long, help_heading = "Output")]
    pub all_modes: bool,
    /// The mode you run the model in, whose timings decide which kernels the verification
    /// keeps: eager, cudagraph, compile or reduce-overhead (torch.compile's); recorded in
    /// the workspace for resumes and `verify` [default: the workspace's, else cudagraph on
    /// a GPU, eager on the CPU]
    #[arg(long, value_enum, value_name = "MODE", help_heading = "Output")]
    pub deploy: Option<autokernel::verify::DeployMode>,
    /// Print the summary as one JSON object on stdout (progress stays on stderr)
    #[arg(long, help_heading = "Output")]
    pub json: bool,
}

/// Runs `autokernel run`: the flags as a [`Job`], its progress on stderr, its summary on
/// stdout.
pub async fn run(args: RunArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    // flags first: a refused command leaves no workspace folder behind
    let spec = args.model.spec(args.experiments.device)?;
    if args.experiments.max_experiments == Some(0) {
        bail!("--max-experiments 0 runs no experiment; pass 1 or more (`autokernel profile` shows the plan alone)");
    }
    // a signal before the loop's handler is installed still ends with exit 130 and a line
    let early_stop = crate::commands::experiments::exit_on_signal_until_the_loop();
    let interrupt = Arc::new(Interrupt::new());
    let loop_over = Arc::new(AtomicBool::new(false));
    let hooks = {
        let (interrupt, loop_over, quiet) = (interrupt.clone(), loop_over.clone(), global.quiet);
        let loop_ended = loop_over.clone();
        StepHooks::new(
            global,
            args.json,
            move || {
                early_stop.abort();
                spawn_signal_handler(interrupt, loop_over, quiet);
            },
            move || loop_ended.store(true, Ordering::SeqCst),
        )
    };
    let progress = Arc::new(
        ProgressReporter::new(global)
            .with_limits(args.experiments.max_experiments, args.experiments.budget)
            .with_steps(hooks),
    );
    let mut job = Job::new(&args.workspace, spec)
        .dtype_given(args.model.dtype.is_some())
        .agent_settings(AgentSettings {
            choice: args.agent,
            llm_base_url: args.llm_base_url.clone(),
            llm_model: args.llm_model.clone(),
        })
        .loop_settings(args.experiments.settings())
        .profile_iterations(args.model.iterations)
        .verify(!args.no_verify)
        .verify_budget(args.verify_budget)
        .all_modes(args.all_modes)
        .deploy(args.deploy)
        .reporter(progress.clone())
        .interrupt(interrupt.clone());
    if let Some(top) = args.top {
        job = job.top(top);
    }
    if let Some(tag) = &args.run_tag {
        job = job.run_tag(tag.clone());
    }
    let outcome = job.run().await;
    progress.clear_step();
    let outcome = outcome?;
    let (experiments, rows) = (&outcome.experiments, &outcome.experiments.rows);
    let verified_now = outcome.verification.done();
    let loop_code = crate::commands::experiments::exit_code(experiments, &interrupt, "kernel");
    let summaries = report::summarize(&outcome.targets, rows);
    if args.json {
        let verification = match &outcome.verification {
            VerificationRun::Done(v) => {
                serde_json::json!({"state": if v.passed { "passed" } else { "failed" }, "cut_short": v.cut_short, "result": v})
            }
            VerificationRun::Interrupted => serde_json::json!({"state": "interrupted"}),
            VerificationRun::NotRun | VerificationRun::CouldNotRun(_) => {
                serde_json::json!({"state": "not_run"})
            }
        };
        let summary = serde_json::json!({
            "workspace": outcome.workspace.root,
            "stop_reason": experiments.outcome.stop.label(),
            "experiments": experiments.outcome.experiments,
            "projected_speedup": report::projected(&summaries),
            "timing_representative": outcome.timing_representative(),
            "targets": summaries,
            "verification": verification,
            "kernels_plugged_in": verified_now.map(|v| v.included.len()),
            "end_to_end_speedup": verified_now.and_then(|v| v.speedup),
            "deploy_speedup": verified_now.and_then(deploy_speedup).map(|(mode, s)| {
                serde_json::json!({ "mode": mode, "speedup": s })
            }),
            "left_out": verified_now.map(|v| &v.excluded),
            "report": outcome.report,
        });
        crate::output::print_stdout(&serde_json::to_string_pretty(&summary)?);
        return Ok(exit_code(loop_code, verified_now));
    }
    crate::output::print_stdout(&report::summary_table(&summaries));
    let mut summary = format!(
        "---\nstop_reason: {}\nexperiments: {}\nprojected_speedup: {:.3}\n",
        experiments.outcome.stop.label(),
        experiments.outcome.experiments,
        report::projected(&summaries)
    );
    if !outcome.timing_representative() {
        // the CPU interpreter's latencies say nothing about speed; say so where they show
        summary.push_str("timings: Triton's interpreter on the CPU, not representative (the keep rule and the speedups above are only exercised, not meaningful)\n");
    }
    if matches!(outcome.verification, VerificationRun::Interrupted) {
        summary.push_str("verified: not run (interrupted before it decided anything)\n");
    }
    if let Some(v) = verified_now {
        summary.push_str(&format!("verified: {}\n", v.verdict()));
        if !v.included.is_empty() {
            summary.push_str(&format!(
                "kernels_plugged_in: {}\nend_to_end_speedup: {}\n",
                v.included.len(),
                v.speedup.map_or("n/a".into(), |s| format!("{s:.3}"))
            ));
            if let Some((mode, s)) = deploy_speedup(v) {
                summary.push_str(&format!(
                    "deploy_speedup: {s:.3} ({mode}, the mode the kernels were chosen for; end_to_end_speedup is eager's)\n"
                ));
            }
        }
        // why each other kernel stayed out: not pluggable, breaks the model, or slower
        for e in &v.excluded {
            summary.push_str(&format!("left_out: {}: {}\n", e.target, e.reason));
        }
    }
    summary.push_str(&format!("report: {}\n", outcome.report.display()));
    crate::output::print_stdout(&summary);
    Ok(exit_code(loop_code, verified_now))
}

/// `run`'s exit code: the loop's ([`crate::commands::experiments::exit_code`]),
/// except that a finished run whose verification found a kernel that breaks the model (or
/// the model with the kernels wrong) exits 1, as `autokernel verify` does on the same
/// workspace: a script that deploys on success must not take those kernels.
fn exit_code(loop_code: ExitCode, verified: Option<&Verification>) -> ExitCode {
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

/// The model's speedup with the kernels in the deploy mode that chose them, when that mode
/// is not eager (whose figure `end_to_end_speedup` already is) and was timed.
fn deploy_speedup(v: &Verification) -> Option<(&str, f64)> {
    let mode = v.deploy.as_deref().filter(|m| *m != "eager")?;
    let timed = v.modes.iter().find(|m| m.mode == mode)?;
    Some((mode, timed.speedup?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verification(passed: bool) -> Verification {
        Verification {
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

    fn mode(name: &str, baseline_ms: f64, kernels_ms: f64) -> autokernel::verification::ModeTiming {
        autokernel::verification::ModeTiming {
            mode: name.into(),
            baseline_ms: Some(baseline_ms),
            kernels_ms: Some(kernels_ms),
            speedup: Some(baseline_ms / kernels_ms),
            error: None,
            ..Default::default()
        }
    }

    #[test]
    fn the_deploy_speedup_is_the_deploy_modes_row_not_eagers() {
        // OPT-shaped on the H100: slower in eager, faster in the CUDA graph that decided
        let mut v = Verification {
            deploy: Some("cudagraph".into()),
            modes: vec![mode("eager", 10.0, 13.2), mode("cudagraph", 1.525, 1.492)],
            speedup: Some(10.0 / 13.2),
            ..Default::default()
        };
        let (m, s) = deploy_speedup(&v).unwrap();
        assert_eq!(m, "cudagraph");
        assert!((s - 1.525 / 1.492).abs() < 1e-12);
        // eager's is end_to_end_speedup already; a mode not timed has none
        v.deploy = Some("eager".into());
        assert_eq!(deploy_speedup(&v), None);
        v.deploy = Some("compile".into());
        assert_eq!(deploy_speedup(&v), None);
    }
}
