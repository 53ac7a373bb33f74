//! `autokernel verify`: plug a workspace's kept kernels into its model and check the model
//! end to end ([`autokernel::verify`]), then print and save the result.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use autokernel::verify::{DeployMode, VerifyOptions, VerifyProgress, VERIFY_TIMEOUT_S};
use autokernel::Workspace;
use autokernel_core::{Device, Interrupt};

use crate::global_args::GlobalArgs;
use crate::progress::spinner;

/// Arguments of `autokernel verify`.
#[derive(Debug, clap::Args)]
#[command(
    after_long_help = "Each kept kernel is plugged into the model alone, then all together, and the
model's output is compared with the unmodified model's. A kernel is left out (an
`excluded:` line says why) when it is wrong: it cannot be loaded, raises inside the model,
changes the model's output beyond the tolerance, or kills or hangs the process (each kernel
is then plugged in alone on a fresh worker to find it, and the others are verified without
it; --timeout says when a verification counts as hung); or when it is merely of no use: the
model has no call site for it at its shapes, or (on a GPU) it does not make the model at
least 1% faster.

The model is timed in the deploy mode and in eager, without and with the included
kernels, each mode's output checked against the eager model's; `mode` lines show the table.
--all-modes times every mode the device has (eager, torch.compile; on a GPU also one forward
replayed from a CUDA graph and torch.compile's reduce-overhead). --deploy picks the mode
whose timings decide: a kernel alone must work there (one that breaks capture or
compilation is left out, with the error) and, on a GPU, make the model faster there. Each
variant is compiled once; a mode's rounds stop once they decide every variant.

--verify-budget bounds the whole verification (default: 30m, or --timeout when longer; each
call that hangs past --timeout is looked into as before): past it, or on Ctrl-C
or SIGTERM, it is cut short, and verify.json keeps what it decided (`cut_short: true`; the
kernels not decided are left out, `undecided`); progress lines on stderr say the mode,
the variant, the round and the time left.

Examples:
  autokernel verify -w autokernel-workspace
  autokernel verify -w autokernel-workspace --deploy compile
  autokernel verify -w autokernel-workspace --device cpu --json

Exit codes: 0 the model with the kernels matches and no kernel is wrong (also when none was
plugged in: `verified: n/a`, or it was cut short by its budget); 1 a kernel is wrong (it
breaks the model or cannot be loaded); 2 error (not a workspace, no usable python, the
model does not load); 130 interrupted (what was decided is saved)."
)]
pub struct VerifyArgs {
    #[command(flatten)]
    pub workspace: super::WorkspaceArg,
    /// Where to run: auto, cuda or cpu [default: the workspace's]
    #[arg(long, value_name = "auto|cuda|cpu")]
    pub device: Option<Device>,
    /// The Python interpreter whose torch and triton to use
    #[arg(long, value_name = "PATH")]
    pub python: Option<PathBuf>,
    /// Seconds the verification may go without an answer before it counts as hung: the
    /// kernel that hangs it is then found (each kernel alone, this long each) and left
    /// out
    #[arg(long, value_name = "SECS", default_value_t = VERIFY_TIMEOUT_S,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout: u64,
    /// The mode you run the model in, whose timings decide which kernels go in (a kernel
    /// that loses in eager mode can win inside a CUDA graph): eager, cudagraph, compile or
    /// reduce-overhead (torch.compile's) [default: the one `run --deploy` chose for the
    /// workspace, else cudagraph on a GPU, eager on the CPU]
    #[arg(long, value_enum, value_name = "MODE")]
    pub deploy: Option<DeployMode>,
    /// How long the whole verification may take, e.g. 2m; past it, it is cut short and
    /// verify.json keeps the kernels it decided [default: 30m, or --timeout when longer]
    #[arg(long, value_name = "DURATION", value_parser = autokernel::settings::parse_duration)]
    pub verify_budget: Option<Duration>,
    /// Time the model in every deploy mode the device has, not only the deploy mode and
    /// eager
    #[arg(long)]
    pub all_modes: bool,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

/// Runs `autokernel verify`; exit 1 when the model with the kernels does not match, or a
/// kernel was left out for being wrong (it cannot be loaded, raises inside the model, or
/// changes its output); a kernel left out for having no call site or for not making the
/// model faster is no failure.
pub async fn run(args: VerifyArgs, global: &GlobalArgs) -> anyhow::Result<ExitCode> {
    let ws = Workspace::open_existing(&args.workspace.dir)?;
    // the workspace is checked before the spinner starts: its errors stand alone
    let (spec, _) = autokernel::verify::model_and_plan(&ws, args.device)?;
    let deploy = args.deploy.or_else(|| {
        ws.settings
            .deploy
            .as_deref()
            .and_then(DeployMode::from_name)
    });
    // so is a GPU-only mode on a device named as the CPU (`auto` is known only once the
    // worker has started, where verification says the same)
    if let Some(mode) = deploy.filter(|m| m.gpu_only() && spec.device == Device::Cpu) {
        anyhow::bail!(
            "--deploy {} needs a GPU (CUDA graphs) and this verification runs on the CPU; use --deploy eager or compile",
            mode.name()
        );
    }
    let options = VerifyOptions {
        device: args.device,
        python: args.python.clone(),
        timeout: Duration::from_secs(args.timeout),
        // the mode `run --deploy` chose for this workspace, unless told otherwise
        deploy,
        budget: args.verify_budget,
        all_modes: args.all_modes,
    };
    if args.verify_budget.is_some_and(|b| b.is_zero()) {
        anyhow::bail!("--verify-budget 0 leaves no time to verify; pass a duration such as 2m");
    }
    let bar = spinner(global, "verifying the kept kernels inside the model");
    // a signal cuts the verification short: the worker is stopped, and what it decided by
    // then is saved (nothing when it had decided nothing)
    let interrupt = Arc::new(Interrupt::new());
    let signal: Arc<std::sync::Mutex<Option<&'static str>>> = Arc::default();
    let listener = {
        let (interrupt, signal) = (interrupt.clone(), signal.clone());
        tokio::spawn(async move {
            let name = crate::commands::experiments::stop_signal().await;
            *signal
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(name);
            interrupt.request();
        })
    };
    let (quiet, lines) = (global.quiet, bar.is_hidden());
    let progress = |p: &VerifyProgress| {
        let line = p.line();
        tracing::debug!("{line}");
        if quiet {
            return;
        }
        if lines {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("{line}");
            }
        } else {
            bar.set_message(line);
        }
    };
    let v = autokernel::verify::verify(&ws, &options, &progress, &interrupt).await;
    listener.abort();
    bar.finish_and_clear();
    let stopped_by = *signal
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let v = match (v, stopped_by) {
        (Err(e), Some(signal)) => {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("\n{signal}: verification stopped; nothing saved ({e})");
            }
            return Ok(ExitCode::from(130));
        }
        (v, _) => v?,
    };
    ws.save_verification(&v)?;
    if let Some(signal) = stopped_by {
        #[allow(clippy::print_stderr)]
        {
            eprintln!(
                "\n{signal}: verification stopped; what it decided is saved, marked cut short"
            );
        }
    }
    if args.json {
        crate::output::print_stdout(&serde_json::to_string_pretty(&v)?);
    } else {
        let verdict = v.verdict();
        let included = if v.included.is_empty() {
            "none".to_string()
        } else {
            v.included.join(", ")
        };
        crate::output::print_stdout(&format!(
            "verified: {verdict}\nincluded: {included}\n{}eager_ms: {}\noptimized_ms: {}\nspeedup: {}",
            v.excluded
                .iter()
                .map(|e| format!("excluded: {}: {}\n", e.target, e.reason))
                .collect::<String>(),
            v.eager_ms.map_or("n/a".into(), |x| format!("{x:.3}")),
            v.optimized_ms.map_or("n/a".into(), |x| format!("{x:.3}")),
            v.speedup.map_or("n/a".into(), |x| format!("{x:.3}")),
        ));
        if let Some(deploy) = &v.deploy {
            crate::output::print_stdout(&format!(
                "deploy: {deploy} (the mode whose timings decided which kernels went in)"
            ));
        }
        for m in &v.modes {
            let ms = |x: Option<f64>| x.map_or("n/a".to_string(), |x| format!("{x:.3}"));
            let line = match &m.error {
                Some(e) => format!("mode {}: {e}", m.mode),
                None => format!(
                    "mode {}: {} ms without kernels, {} ms with them, speedup {}{}",
                    m.mode,
                    ms(m.baseline_ms),
                    ms(m.kernels_ms),
                    m.speedup.map_or("n/a".to_string(), |x| format!("{x:.3}x")),
                    match (m.baseline_launches, m.kernels_launches) {
                        (Some(b), Some(k)) => format!(", {b} → {k} kernel launches per forward"),
                        (Some(b), None) => format!(", {b} kernel launches per forward"),
                        _ => String::new(),
                    }
                ),
            };
            crate::output::print_stdout(&line);
        }
        if !v.timing_representative {
            crate::output::print_stdout(
                "timings: Triton's interpreter on the CPU, not representative (the speedup says nothing)",
            );
        }
    }
    Ok(if signal_stopped(&signal) {
        ExitCode::from(130)
    } else if v.passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

/// Whether a signal stopped the verification.
fn signal_stopped(signal: &std::sync::Mutex<Option<&'static str>>) -> bool {
    signal
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .is_some()
}
