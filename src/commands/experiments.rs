//! What `run` and `tune` share on the command line: the flags of the edit → benchmark →
//! keep-or-revert loop ([`LoopArgs`], resolved into [`LoopSettings`]), the loop with
//! progress lines and Ctrl-C and SIGTERM handling ([`run_experiments`]), and exit codes.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use autokernel::experiments::{Baselines, Experiments, SharedReporter};
use autokernel::settings::LoopSettings;
use autokernel::{Agent, Services, Workspace};
use autokernel_core::{Device, Interrupt};

use crate::global_args::GlobalArgs;
use crate::progress::ProgressReporter;

/// Budget and bench flags of the loop, common to `run` and `tune`.
#[derive(Debug, clap::Args)]
pub struct LoopArgs {
    /// Stop after this many experiments in this invocation (baselines not counted; a resumed
    /// run counts afresh)
    #[arg(long, value_name = "N", help_heading = "Budget")]
    pub max_experiments: Option<u64>,
    /// Stop after this much wall time, e.g. 45m, 8h, 1h30m
    #[arg(long, value_name = "DURATION", value_parser = autokernel::settings::parse_duration, help_heading = "Budget")]
    pub budget: Option<Duration>,
    /// Wall time per target before moving on, e.g. 30m
    #[arg(long, value_name = "DURATION", value_parser = autokernel::settings::parse_duration, help_heading = "Budget")]
    pub target_budget: Option<Duration>,
    /// Consecutive experiments not kept before moving on to the next target [default: 8]
    #[arg(long, value_name = "N", help_heading = "Budget")]
    pub plateau: Option<u32>,
    /// Keep a candidate only when this much faster than the best, in percent [default: 1]
    #[arg(long, value_name = "PCT", help_heading = "Budget")]
    pub keep_threshold_pct: Option<f64>,
    /// Where kernels run: auto (CUDA if present), cuda, or cpu (Triton's interpreter)
    #[arg(
        long,
        default_value = "auto",
        value_name = "auto|cuda|cpu",
        help_heading = "Bench"
    )]
    pub device: Device,
    /// The Python interpreter whose torch and triton to use [default: $AUTOKERNEL_PYTHON, $VIRTUAL_ENV, python3]
    #[arg(long, value_name = "PATH", help_heading = "Bench")]
    pub python: Option<PathBuf>,
    /// Time limit of every benchmark, in seconds [default: a baseline gets 600; a candidate
    /// 10x the best's own evaluation time, at least 60 and at most 600, so that a hung
    /// candidate costs minutes, not ten]
    #[arg(long, value_name = "SECS", help_heading = "Bench")]
    pub bench_timeout: Option<u64>,
}

impl LoopArgs {
    /// These flags as the library's settings (each flag is the field of the same name).
    pub fn settings(&self) -> LoopSettings {
        LoopSettings {
            max_experiments: self.max_experiments,
            budget: self.budget,
            target_budget: self.target_budget,
            plateau: self.plateau,
            keep_threshold_pct: self.keep_threshold_pct,
            device: self.device,
            python: self.python.clone(),
            bench_timeout_s: self.bench_timeout,
        }
    }
}

/// Runs the loop over the baselines' targets on the workspace, with progress lines on
/// stderr and Ctrl-C handling (`tune`'s; `run`'s goes through [`autokernel::Job`]).
///
/// # Errors
/// When `results.tsv` cannot be opened or the loop fails (the store, the log).
#[allow(clippy::too_many_arguments)] // the loop's parts and the command's flags
pub async fn run_experiments(
    args: &LoopArgs,
    ws: &Workspace,
    services: &Services,
    agent: Box<dyn Agent>,
    store: autokernel_vcs::GixStore,
    baselines: Baselines,
    global: &GlobalArgs,
) -> anyhow::Result<(Experiments, Arc<Interrupt>)> {
    let reporter = ProgressReporter::new(global).with_limits(args.max_experiments, args.budget);
    let reporter = Arc::new(match baselines.from {
        Some(_) => reporter.without_model(),
        None => reporter,
    });
    let interrupt = Arc::new(Interrupt::new());
    let loop_over = Arc::new(AtomicBool::new(false));
    spawn_signal_handler(interrupt.clone(), loop_over.clone(), global.quiet);
    let experiments = autokernel::experiments::run_experiments(
        ws,
        &args.settings(),
        services,
        agent,
        store,
        baselines,
        Box::new(SharedReporter(reporter.clone())),
        &interrupt,
    )
    .await;
    loop_over.store(true, Ordering::SeqCst);
    reporter.finish();
    Ok((experiments?, interrupt))
}

/// The command's exit code after a loop: 130 when interrupted (Ctrl-C or SIGTERM, during
/// the loop or after it), 0 when any row passed the judge, 1 when none did (the command
/// finished, but the answer is no; `what` names the things that failed in the error logged
/// then, e.g. "kernel").
pub fn exit_code(experiments: &Experiments, interrupt: &Interrupt, what: &str) -> ExitCode {
    if experiments.interrupted() || interrupt.stop_requested() {
        return ExitCode::from(130);
    }
    if experiments.any_passed() {
        return ExitCode::SUCCESS;
    }
    tracing::error!("no {what} passed the judge in this workspace: every one failed or timed out (see results.tsv and autokernel.log)");
    ExitCode::from(1)
}

/// First Ctrl-C or SIGTERM (`timeout`, `docker stop`, Slurm): finish the experiment in
/// flight, then stop, and end with the report. Second: abandon it. Once `loop_over` is
/// set, a signal cuts the work after the loop (the verification) short.
pub fn spawn_signal_handler(interrupt: Arc<Interrupt>, loop_over: Arc<AtomicBool>, quiet: bool) {
    tokio::spawn(async move {
        let mut term = Terminate::new();
        while let Some(signal) = next_signal(&mut term).await {
            interrupt.request();
            if quiet {
                continue;
            }
            #[allow(clippy::print_stderr)]
            if loop_over.load(Ordering::SeqCst) {
                eprintln!("\n{signal}: the experiments are over; cutting the verification short, the report follows");
            } else if interrupt.abandon_requested() {
                eprintln!(
                    "\n{signal}: abandoning the experiment in flight (it is reverted and logged)"
                );
            } else {
                eprintln!(
                    "\n{signal}: stopping after the current experiment; press Ctrl-C (or send SIGTERM) again to abandon it"
                );
            }
        }
    });
}

/// Before the loop's own handler is installed (device check, profiling, planning): the
/// first Ctrl-C or SIGTERM says where the command stopped and exits 130 at once, as the
/// loop's handler would, instead of dying silently (SIGTERM: 143). Abort the returned task
/// just before the loop starts. A folder created for the run may stay behind with its log;
/// the same command resumes or starts over in it.
pub fn exit_on_signal_until_the_loop() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let signal = stop_signal().await;
        #[allow(clippy::print_stderr)]
        {
            eprintln!("\n{signal}: stopped before the first experiment (while checking the device, profiling or planning); the same command starts again");
        }
        std::process::exit(130);
    })
}

/// The first Ctrl-C or SIGTERM, for the commands that stop at once (`bench`, `verify`):
/// its name. Never returns where neither can be handled.
pub async fn stop_signal() -> &'static str {
    match next_signal(&mut Terminate::new()).await {
        Some(signal) => signal,
        None => std::future::pending().await,
    }
}

/// The name of the next Ctrl-C or SIGTERM; None when Ctrl-C cannot be listened for.
async fn next_signal(term: &mut Terminate) -> Option<&'static str> {
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.ok().map(|()| "Ctrl-C"),
        () = term.recv() => Some("SIGTERM"),
    }
}

/// SIGTERM as a stream (Unix); elsewhere, or when the handler cannot be installed, it
/// never fires.
struct Terminate {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Terminate {
    fn new() -> Self {
        Terminate {
            #[cfg(unix)]
            signal: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .map_err(|e| {
                    tracing::warn!("cannot handle SIGTERM, it will stop the run at once: {e}")
                })
                .ok(),
        }
    }

    async fn recv(&mut self) {
        #[cfg(unix)]
        if let Some(signal) = self.signal.as_mut() {
            if signal.recv().await.is_some() {
                return;
            }
            self.signal = None;
        }
        std::future::pending::<()>().await;
    }
}
