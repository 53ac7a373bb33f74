//! What `run` and `tune` share: the flags of the edit → benchmark → keep-or-revert loop
//! ([`LoopArgs`]) and the loop itself over a workspace ([`run_experiments`]), with its
//! progress lines, Ctrl-C and SIGTERM handling and the workspace folder's clean-up on early
//! failure.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::bail;
use autokernel_core::{
    lookup_gpu, Agent, DType, Device, ExperimentRecord, Interrupt, LoopOptions, LoopOutcome,
    OptimizationLoop, ResultsLog, StopReason, Target,
};

use crate::cli::GlobalArgs;
use crate::defaults;
use crate::progress::ProgressReporter;
use crate::workspace::Workspace;

/// Budget and bench flags of the loop, common to `run` and `tune`.
#[derive(Debug, clap::Args)]
pub struct LoopArgs {
    /// Stop after this many experiments in this invocation (baselines not counted; a resumed
    /// run counts afresh)
    #[arg(long, value_name = "N", help_heading = "Budget")]
    pub max_experiments: Option<u64>,
    /// Stop after this much wall time, e.g. 45m, 8h, 1h30m
    #[arg(long, value_name = "DURATION", value_parser = defaults::parse_duration, help_heading = "Budget")]
    pub budget: Option<Duration>,
    /// Wall time per target before moving on, e.g. 30m
    #[arg(long, value_name = "DURATION", value_parser = defaults::parse_duration, help_heading = "Budget")]
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
    /// Refuses values that would run nothing, before anything is written.
    ///
    /// # Errors
    /// A message naming the flag and a value that works.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.max_experiments == Some(0) {
            bail!("--max-experiments 0 runs no experiment; pass 1 or more");
        }
        if self.budget.is_some_and(|b| b.is_zero()) {
            bail!("--budget 0 leaves no time for an experiment; pass a duration such as 20m or 8h");
        }
        if self.target_budget.is_some_and(|b| b.is_zero()) {
            bail!("--target-budget 0 leaves no time for an experiment on a target; pass a duration such as 30m");
        }
        if self.plateau == Some(0) {
            bail!("--plateau 0 moves on from a target before any experiment counts; pass 1 or more (the default is 8)");
        }
        if self.bench_timeout == Some(0) {
            bail!(
                "--bench-timeout 0 would time out every benchmark; pass a limit in seconds, e.g. 600"
            );
        }
        if self
            .keep_threshold_pct
            .is_some_and(|p| !(0.0..100.0).contains(&p))
        {
            bail!("--keep-threshold-pct must be in [0, 100), e.g. 1 for 1%");
        }
        Ok(())
    }

    /// The worker for the workspace (its `--python`, `--device` and measured bandwidth),
    /// and the folder of the scripts it runs (profiling, verification, device info).
    ///
    /// # Errors
    /// No usable Python, or the scripts cannot be written into the workspace.
    pub fn services(&self, ws: &Workspace) -> anyhow::Result<(defaults::Services, PathBuf)> {
        let services = defaults::Services::start(
            self.python.as_deref(),
            self.device,
            ws.settings.measured_bandwidth_gb_s,
        )?;
        Ok((services, crate::commands::verify::install_scripts(ws)?))
    }

    /// Refuses bfloat16 where it will run on the CPU, before a workspace folder is touched:
    /// with `--device cpu`, and with `--device auto` when torch sees no GPU (asked of the
    /// interpreter in a subprocess, a torch import: only for bfloat16). Where that question
    /// cannot be answered, the worker's own check later decides.
    ///
    /// # Errors
    /// [`refuse_bfloat16_on_cpu`]'s.
    pub fn refuse_bfloat16_where_it_cannot_run(&self, dtype: DType) -> anyhow::Result<()> {
        let on_cpu = match self.device {
            Device::Cpu => true,
            Device::Cuda => false,
            Device::Auto => dtype == DType::Bfloat16 && torch_sees_no_gpu(self.python.as_deref()),
        };
        refuse_bfloat16_on_cpu(dtype, on_cpu)
    }

    /// The loop's options: these flags over the workspace's settings over the defaults.
    fn options(&self, ws: &Workspace) -> LoopOptions {
        let mut options = LoopOptions::new(ws.path(".autokernel/scratch"));
        options.device = self.device;
        options.max_experiments = self.max_experiments;
        options.budget = self.budget;
        // a limit given is every request's; by default a candidate's limit follows the
        // incumbent's own evaluation time, capped at the default limit
        match self.bench_timeout {
            Some(secs) => {
                options.bench_timeout = Duration::from_secs(secs);
                options.scale_timeout = None;
            }
            None => {
                options.bench_timeout = Duration::from_secs(DEFAULT_BENCH_TIMEOUT_S);
                options.scale_timeout = Some(autokernel_core::TimeoutScale::default());
            }
        }
        options.keep_threshold = self
            .keep_threshold_pct
            .map(|p| p / 100.0)
            .or(ws.settings.keep_threshold)
            .unwrap_or(options.keep_threshold);
        options.orchestrator.plateau = self
            .plateau
            .or(ws.settings.plateau)
            .unwrap_or(options.orchestrator.plateau);
        options.orchestrator.target_budget = self.target_budget;
        if let Some(goal) = ws.settings.roofline_goal_pct {
            options.orchestrator.roofline_goal_pct = goal;
        }
        options
    }
}

/// The time limit of a baseline, and the cap of a candidate's scaled limit, in seconds,
/// when `--bench-timeout` is not given.
pub const DEFAULT_BENCH_TIMEOUT_S: u64 = 600;

/// Refuses bfloat16 when `on_cpu` (`--device cpu`, or what `auto` resolved to), the bench
/// worker's rule, so that `run` and `tune` say it before they profile or create anything.
///
/// # Errors
/// The message the worker would give, with the flag to change.
pub fn refuse_bfloat16_on_cpu(dtype: DType, on_cpu: bool) -> anyhow::Result<()> {
    if on_cpu && dtype == DType::Bfloat16 {
        bail!("--dtype bfloat16 cannot run on the CPU (Triton's interpreter uses numpy, which has no bfloat16)\nhint: pass --dtype float16 or float32, or run on a GPU");
    }
    Ok(())
}

/// Whether the interpreter's torch says plainly that it sees no GPU; `false` when the
/// interpreter cannot be found or run (its own errors come later, from the worker).
fn torch_sees_no_gpu(python: Option<&Path>) -> bool {
    let Ok(python) = autokernel_bench::resolve_python(python) else {
        return false;
    };
    std::process::Command::new(python)
        .args(["-c", "import torch; print(torch.cuda.is_available())"])
        .output()
        .is_ok_and(|out| {
            out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "False"
        })
}

/// What a finished loop hands back.
pub struct Experiments {
    /// Why it stopped and how many experiments ran.
    pub outcome: LoopOutcome,
    /// Every row of `results.tsv`, earlier invocations included.
    pub rows: Vec<ExperimentRecord>,
    /// The flag the signal handler sets; it stays installed after the loop, so that work
    /// after it (`run`'s verification) can stop on a signal too ([`Interrupt::stopped`]).
    pub interrupt: Arc<Interrupt>,
}

/// Each target with the source of its baseline `kernel.py`.
pub struct Baselines {
    /// The targets and their starting sources.
    pub kernels: Vec<(Target, String)>,
    /// Where those sources come from when they are not a model's starters (`tune`'s file),
    /// for the baseline rows' description; set, the targets are no model's and the progress
    /// lines show no share of model time.
    pub from: Option<String>,
}

/// Runs the loop over the baselines' targets on the workspace, with progress lines on
/// stderr and Ctrl-C handling.
///
/// # Errors
/// When `results.tsv` cannot be opened or the loop fails (the store, the log).
pub async fn run_experiments(
    args: &LoopArgs,
    ws: &Workspace,
    services: &defaults::Services,
    agent: Box<dyn Agent>,
    store: autokernel_vcs::GixStore,
    baselines: Baselines,
    global: &GlobalArgs,
) -> anyhow::Result<Experiments> {
    let log = ResultsLog::open(ws.path("results.tsv"))?;
    if log.repaired_torn_line() {
        tracing::warn!("results.tsv had a torn last row (a killed run); it was cut off and saved to results.tsv.torn");
    }
    let reporter = ProgressReporter::new(global).with_limits(args.max_experiments, args.budget);
    let reporter = match baselines.from {
        Some(_) => reporter.without_model(),
        None => reporter,
    };
    let reporter = Arc::new(reporter);
    let mut options = args.options(ws);
    options.baseline_source = baselines.from;
    options.gpu = services
        .gpu_name
        .as_deref()
        .and_then(|n| lookup_gpu(n).spec().cloned());
    let mut the_loop = OptimizationLoop::new(agent, services.benchmarker(), store, log, options)
        .with_reporter(Box::new(SharedReporter(reporter.clone())));
    let interrupt = Arc::new(Interrupt::new());
    let loop_over = Arc::new(AtomicBool::new(false));
    spawn_signal_handler(interrupt.clone(), loop_over.clone(), global.quiet);
    let outcome = the_loop.run(baselines.kernels, &interrupt).await;
    loop_over.store(true, Ordering::SeqCst);
    reporter.finish();
    let outcome = outcome?;
    // rows of earlier invocations get back the head-to-head figures kept in their notes
    let mut rows = the_loop.log().rows().to_vec();
    ws.merge_notes(&mut rows);
    Ok(Experiments {
        outcome,
        rows,
        interrupt,
    })
}

impl Experiments {
    /// The command's exit code: 130 when interrupted (Ctrl-C or SIGTERM, during the loop
    /// or after it), 0 when any row passed the judge, 1 when none did (the command
    /// finished, but the answer is no; `what` names the things that failed in the error
    /// logged then, e.g. "kernel").
    pub fn exit_code(&self, what: &str) -> ExitCode {
        if self.outcome.stop == StopReason::Interrupted || self.interrupt.stop_requested() {
            return ExitCode::from(130);
        }
        if self.rows.iter().any(|r| r.correctness.is_pass()) {
            return ExitCode::SUCCESS;
        }
        tracing::error!("no {what} passed the judge in this workspace: every one failed or timed out (see results.tsv and autokernel.log)");
        ExitCode::from(1)
    }
}

/// A workspace folder that did not exist before this command: removed on drop unless
/// [`CreatedFolder::keep`] was called (the command got as far as a plan).
pub struct CreatedFolder {
    path: Option<PathBuf>,
}

impl CreatedFolder {
    /// Remembers `path` when it does not exist yet.
    pub fn new(path: &Path) -> Self {
        CreatedFolder {
            path: (!path.exists()).then(|| path.to_path_buf()),
        }
    }

    /// The folder has what makes it a workspace (a plan): keep it.
    pub fn keep(&mut self) {
        self.path = None;
    }
}

impl Drop for CreatedFolder {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

/// Lets the loop own a boxed reporter while the command keeps a handle to finish it.
struct SharedReporter(Arc<ProgressReporter>);

impl autokernel_core::Reporter for SharedReporter {
    fn on_target_start(&self, s: &autokernel_core::TargetState) {
        self.0.on_target_start(s)
    }
    fn on_experiment_start(&self, t: &autokernel_core::Target, n: u64) {
        self.0.on_experiment_start(t, n)
    }
    fn on_candidate(&self, t: &autokernel_core::Target, n: u64, d: &str) {
        self.0.on_candidate(t, n, d)
    }
    fn on_phase(&self, t: &autokernel_core::Target, n: u64, p: autokernel_core::Phase) {
        self.0.on_phase(t, n, p)
    }
    fn on_resume(&self, s: &autokernel_core::ResumeSummary) {
        self.0.on_resume(s)
    }
    fn on_verdict(&self, n: u64, v: &autokernel_core::keep::KeepVerdict) {
        self.0.on_verdict(n, v)
    }
    fn on_decision(
        &self,
        r: &autokernel_core::ExperimentRecord,
        b: Option<&autokernel_core::BenchResult>,
    ) {
        self.0.on_decision(r, b)
    }
    fn on_target_end(&self, t: &autokernel_core::Target, w: &autokernel_core::MoveOn) {
        self.0.on_target_end(t, w)
    }
    fn on_warning(&self, m: &str) {
        self.0.on_warning(m)
    }
}

/// First Ctrl-C or SIGTERM (`timeout`, `docker stop`, Slurm): finish the experiment in
/// flight, then stop, and end with the report. Second: abandon it. Once `loop_over` is
/// set, a signal cuts the work after the loop (the verification) short.
fn spawn_signal_handler(interrupt: Arc<Interrupt>, loop_over: Arc<AtomicBool>, quiet: bool) {
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
