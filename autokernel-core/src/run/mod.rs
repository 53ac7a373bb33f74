//! The edit → benchmark → keep-or-revert loop ([`OptimizationLoop`]), generic over the four
//! traits, with its orchestrator, keep rule, progress reporter and interrupt flag.

pub mod keep;
pub mod orchestrator;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use crate::pyliteral::KernelConfig;
use crate::{
    Agent, AgentError, BenchError, BenchRequest, BenchResult, Benchmarker, CommitId,
    CompareRequest, Correctness, Decision, Device, ExperimentDraft, ExperimentRecord, GpuSpec,
    Proposal, ProposalContext, ResultsError, ResultsLog, StoreError, Target, VersionStore,
};
use keep::{decide, KeepVerdict, DEFAULT_KEEP_THRESHOLD};
use orchestrator::{MoveOn, Orchestrator, OrchestratorOptions, TargetState};

/// An interrupt flag shared between a signal handler (Ctrl-C, SIGTERM) and the loop: the
/// first request finishes the experiment in flight and stops; the second abandons it
/// (reverted and logged).
#[derive(Debug, Default)]
pub struct Interrupt {
    level: AtomicU8,
    notify: Notify,
}

impl Interrupt {
    /// A flag with nothing requested.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records one more interrupt (call from the signal handler).
    pub fn request(&self) {
        self.level.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_waiters();
    }

    /// Whether at least one interrupt arrived: stop after the current experiment.
    pub fn stop_requested(&self) -> bool {
        self.level.load(Ordering::SeqCst) >= 1
    }

    /// Whether a second interrupt arrived: abandon the experiment in flight.
    pub fn abandon_requested(&self) -> bool {
        self.level.load(Ordering::SeqCst) >= 2
    }

    /// Resolves once a stop was requested (at once when one already was): for work after
    /// the loop, such as a verification, that a signal should cut short.
    pub async fn stopped(&self) {
        loop {
            let notified = self.notify.notified();
            if self.stop_requested() {
                return;
            }
            notified.await;
        }
    }

    async fn abandoned(&self) {
        loop {
            let notified = self.notify.notified();
            if self.abandon_requested() {
                return;
            }
            notified.await;
        }
    }
}

/// What the loop is doing for the experiment in flight, for progress displays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Judging a target's starting kernel: its baseline.
    Baseline,
    /// Waiting for the agent's proposal.
    Proposing,
    /// Judging the candidate: the correctness stages, then its timing.
    Judging,
    /// Timing the candidate head to head against the best, for the keep rule.
    Comparing,
}

impl Phase {
    /// The word a progress line shows: `baseline`, `proposing`, `judging`, `comparing`.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Baseline => "baseline",
            Phase::Proposing => "proposing",
            Phase::Judging => "judging",
            Phase::Comparing => "comparing",
        }
    }
}

/// What a resumed run starts from, said once before its first experiment.
#[derive(Debug, Clone, PartialEq)]
pub struct ResumeSummary {
    /// Experiments already in `results.tsv`, baselines not counted.
    pub experiments_done: u64,
    /// Of those, how many were kept.
    pub kept: u64,
    /// Targets already moved on from (plateau, budget, roofline goal, failed baseline).
    pub targets_done: usize,
    /// Targets in all.
    pub targets: usize,
    /// The target the loop works on next, if any is left.
    pub next_target: Option<String>,
    /// This invocation's experiment cap, if any (a resumed run counts afresh).
    pub max_experiments: Option<u64>,
    /// This invocation's wall-time budget, if any (a resumed run counts afresh).
    pub budget: Option<Duration>,
}

/// Progress events of the loop. The binary draws them; libraries and tests can ignore them.
/// Every method has a no-op default.
pub trait Reporter: Send + Sync {
    /// Work starts (or resumes) on a target.
    fn on_target_start(&self, _state: &TargetState) {}
    /// An experiment starts.
    fn on_experiment_start(&self, _target: &Target, _experiment: u64) {}
    /// The agent proposed a candidate, now being benchmarked.
    fn on_candidate(&self, _target: &Target, _experiment: u64, _description: &str) {}
    /// The experiment in flight entered `phase` (called in order: `Baseline` for a
    /// target's first row; `Proposing`, `Judging`, then `Comparing` for a candidate that
    /// passed the judge).
    fn on_phase(&self, _target: &Target, _experiment: u64, _phase: Phase) {}
    /// A run resumes a workspace that already has experiments: called once, before the
    /// first new experiment.
    fn on_resume(&self, _summary: &ResumeSummary) {}
    /// The keep rule decided on experiment `experiment` (called just before its
    /// [`Reporter::on_decision`], for candidates that were benchmarked): the measured
    /// speedup of a kept one, or why one was reverted (`0.6% faster over 5 repetitions,
    /// below the 1.0% threshold`).
    fn on_verdict(&self, _experiment: u64, _verdict: &keep::KeepVerdict) {}
    /// An experiment ended and its row was written.
    fn on_decision(&self, _record: &ExperimentRecord, _result: Option<&BenchResult>) {}
    /// The orchestrator moved on from a target.
    fn on_target_end(&self, _target: &Target, _why: &MoveOn) {}
    /// Something the user should know that is not an error.
    fn on_warning(&self, _message: &str) {}
}

/// A reporter that ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoReporter;
impl Reporter for NoReporter {}

/// Choices of the loop that have defaults: [`LoopOptions::new`], then the `with_*` setters
/// (or assignments to the public fields); fields may be added, so outside this crate it
/// cannot be written as a struct literal.
///
/// ```
/// use std::time::Duration;
/// use autokernel_core::{Device, LoopOptions, OrchestratorOptions};
/// let options = LoopOptions::new("workspace/.autokernel/scratch")
///     .with_device(Device::Cpu)
///     .with_max_experiments(20)
///     .with_orchestrator(OrchestratorOptions::default().with_plateau(4));
/// assert_eq!(options.max_experiments, Some(20));
/// assert_eq!(options.budget, None);
/// assert_eq!(options.orchestrator.plateau, 4);
/// assert_eq!(options.bench_timeout, Duration::from_secs(300));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LoopOptions {
    /// Keep threshold: a candidate must be more than this fraction faster (default 0.01).
    pub keep_threshold: f64,
    /// Stop after this many experiments in this invocation, baselines not counted.
    pub max_experiments: Option<u64>,
    /// Stop after this much wall time in this invocation.
    pub budget: Option<Duration>,
    /// When to move on from a target.
    pub orchestrator: OrchestratorOptions,
    /// Where kernels run.
    pub device: Device,
    /// Time limit of one bench request: the limit of every baseline and head-to-head
    /// comparison, and the cap of a scaled limit ([`LoopOptions::scale_timeout`]).
    pub bench_timeout: Duration,
    /// Scales a candidate's limit to the incumbent's own measured evaluation time (the
    /// baseline's, then the best's), so that a hung candidate costs seconds to minutes, not
    /// `bench_timeout`; `None` gives every request `bench_timeout`.
    pub scale_timeout: Option<TimeoutScale>,
    /// Interleaved repetitions of the head-to-head comparison (default 5).
    pub compare_repetitions: u32,
    /// A folder outside version control for the incumbent's copy during a comparison.
    pub scratch_dir: PathBuf,
    /// The GPU's figures, when known, for the agent's context.
    pub gpu: Option<GpuSpec>,
    /// Where each target's starting `kernel.py` comes from, for its baseline row's
    /// description, e.g. `softmax.py` (default: the kind's starter kernel).
    pub baseline_source: Option<String>,
}

impl LoopOptions {
    /// Defaults with `scratch_dir` as the scratch folder.
    pub fn new(scratch_dir: impl Into<PathBuf>) -> Self {
        LoopOptions {
            keep_threshold: DEFAULT_KEEP_THRESHOLD,
            max_experiments: None,
            budget: None,
            orchestrator: OrchestratorOptions::default(),
            device: Device::Auto,
            bench_timeout: Duration::from_secs(300),
            scale_timeout: Some(TimeoutScale::default()),
            compare_repetitions: 5,
            scratch_dir: scratch_dir.into(),
            gpu: None,
            baseline_source: None,
        }
    }

    /// Sets [`LoopOptions::keep_threshold`].
    pub fn with_keep_threshold(mut self, threshold: f64) -> Self {
        self.keep_threshold = threshold;
        self
    }

    /// Sets [`LoopOptions::max_experiments`].
    pub fn with_max_experiments(mut self, max: u64) -> Self {
        self.max_experiments = Some(max);
        self
    }

    /// Sets [`LoopOptions::budget`].
    pub fn with_budget(mut self, budget: Duration) -> Self {
        self.budget = Some(budget);
        self
    }

    /// Sets [`LoopOptions::orchestrator`].
    pub fn with_orchestrator(mut self, orchestrator: OrchestratorOptions) -> Self {
        self.orchestrator = orchestrator;
        self
    }

    /// Sets [`LoopOptions::device`].
    pub fn with_device(mut self, device: Device) -> Self {
        self.device = device;
        self
    }

    /// Sets [`LoopOptions::bench_timeout`].
    pub fn with_bench_timeout(mut self, timeout: Duration) -> Self {
        self.bench_timeout = timeout;
        self
    }

    /// Sets [`LoopOptions::scale_timeout`]; `None` gives every request `bench_timeout`.
    pub fn with_scale_timeout(mut self, scale: Option<TimeoutScale>) -> Self {
        self.scale_timeout = scale;
        self
    }

    /// Sets [`LoopOptions::compare_repetitions`].
    pub fn with_compare_repetitions(mut self, repetitions: u32) -> Self {
        self.compare_repetitions = repetitions;
        self
    }

    /// Sets [`LoopOptions::gpu`].
    pub fn with_gpu(mut self, gpu: GpuSpec) -> Self {
        self.gpu = Some(gpu);
        self
    }

    /// Sets [`LoopOptions::baseline_source`].
    pub fn with_baseline_source(mut self, from: impl Into<String>) -> Self {
        self.baseline_source = Some(from.into());
        self
    }
}

/// How a candidate's time limit follows the incumbent's measured evaluation time:
/// `clamp(factor × incumbent_s, floor, bench_timeout)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeoutScale {
    /// Multiple of the incumbent's evaluation time (default 10: a candidate whose
    /// configuration launches more programs may be several times slower on Triton's
    /// interpreter, and is still no hang).
    pub factor: f64,
    /// The least limit (default 60 s: compiling a new configuration on a GPU takes seconds).
    pub floor: Duration,
}

impl Default for TimeoutScale {
    fn default() -> Self {
        TimeoutScale {
            factor: 10.0,
            floor: Duration::from_secs(60),
        }
    }
}

impl TimeoutScale {
    /// The limit for a candidate when the incumbent took `incumbent_s` seconds to judge,
    /// capped at `cap`.
    pub fn limit(&self, incumbent_s: f64, cap: Duration) -> Duration {
        let scaled = Duration::try_from_secs_f64(self.factor * incumbent_s.max(0.0)).unwrap_or(cap);
        scaled.max(self.floor).min(cap)
    }
}

/// Errors that stop the loop. A bad candidate never does: it becomes a row.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    /// The agent cannot go on. The experiment it was proposing is in `results.tsv` as an
    /// `invalid` row whose description is this error.
    #[error(transparent)]
    Agent(#[from] AgentError),
    /// The harness cannot run.
    #[error(transparent)]
    Bench(#[from] BenchError),
    /// The version store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `results.tsv` could not be written.
    #[error(transparent)]
    Results(#[from] ResultsError),
    /// The scratch folder could not be written.
    #[error("cannot write scratch file `{path}`")]
    Scratch {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// Why the loop returned.
#[derive(Debug, Clone, PartialEq)]
pub enum StopReason {
    /// Every target was moved on from.
    AllTargetsDone,
    /// `max_experiments` reached.
    ExperimentCap,
    /// The wall-time budget ran out.
    Budget,
    /// Ctrl-C.
    Interrupted,
}

impl StopReason {
    /// The word printed after `stop_reason:` in the summaries of `run` and `tune`.
    pub fn label(&self) -> &'static str {
        match self {
            StopReason::AllTargetsDone => "all_targets_done",
            StopReason::ExperimentCap => "experiment_cap",
            StopReason::Budget => "budget",
            StopReason::Interrupted => "interrupted",
        }
    }
}

/// What a run did.
#[derive(Debug, Clone)]
pub struct LoopOutcome {
    /// Why it stopped.
    pub stop: StopReason,
    /// Experiments run in this invocation, baselines not counted.
    pub experiments: u64,
    /// Every target's bookkeeping.
    pub states: Vec<TargetState>,
    /// `1 / (1 − Σ fᵢ·(1 − 1/sᵢ))` over the targets' best speedups.
    pub projected_speedup: f64,
}

struct Incumbent {
    source: String,
    result: Option<BenchResult>,
    baseline_latency_us: Option<f64>,
    /// Seconds its own evaluation took (its bench request; on resume, its row's
    /// duration), for the scaled limit of the next candidate.
    eval_s: Option<f64>,
}

/// How a target's baseline ended.
enum BaselineOutcome {
    /// It passed: the target's first incumbent.
    Ready(Box<Incumbent>),
    /// It has a verdict other than PASS: nothing to improve on.
    Failed(MoveOn),
    /// It was cut short before a verdict: reverted, judged again on resume.
    Interrupted,
}

/// The loop: for the target the [`Orchestrator`] picks, propose → commit → bench →
/// keep/revert → log, until every target is done, the budget or cap is reached, or Ctrl-C.
pub struct OptimizationLoop<A, B, V> {
    agent: A,
    bench: B,
    store: V,
    log: ResultsLog,
    options: LoopOptions,
    reporter: Box<dyn Reporter>,
    failures: Vec<(u64, String)>,
}

fn sha256_hex(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl<A: Agent, B: Benchmarker, V: VersionStore> OptimizationLoop<A, B, V> {
    /// Assembles a loop from its parts; `log` is the workspace's open `results.tsv`.
    pub fn new(agent: A, bench: B, store: V, log: ResultsLog, options: LoopOptions) -> Self {
        OptimizationLoop {
            agent,
            bench,
            store,
            log,
            options,
            reporter: Box::new(NoReporter),
            failures: Vec::new(),
        }
    }

    /// Sends progress events to `reporter`.
    pub fn with_reporter(mut self, reporter: Box<dyn Reporter>) -> Self {
        self.reporter = reporter;
        self
    }

    /// The results log.
    pub fn log(&self) -> &ResultsLog {
        &self.log
    }

    /// The version store.
    pub fn store(&self) -> &V {
        &self.store
    }

    /// The benchmarker.
    pub fn bench(&self) -> &B {
        &self.bench
    }

    /// The rows of `results.tsv` for one target, oldest first.
    fn target_rows(&self, id: &str) -> Vec<ExperimentRecord> {
        self.log
            .rows()
            .iter()
            .filter(|r| r.target == id)
            .cloned()
            .collect()
    }

    /// Runs every target to completion (or until a budget, the cap or Ctrl-C). Each pair is
    /// a target and its starting `kernel.py`. Resumes from what `results.tsv` and the store
    /// already hold: experiments committed but never logged are logged as `CRASH`/`revert`
    /// and reverted first.
    ///
    /// # Errors
    /// [`LoopError`] when a part cannot go on; everything written before stays consistent.
    pub async fn run(
        &mut self,
        targets: Vec<(Target, String)>,
        interrupt: &Interrupt,
    ) -> Result<LoopOutcome, LoopError> {
        // rows the loop did not write (forged, edited, repeated) are set aside first: they
        // must not count as logged, nor in the summary, the plateau or a tuner's history
        let decided = self.audit().await;
        self.reconcile(&targets, &decided).await?;
        self.recall().await;
        let started = Instant::now();
        let mut orchestrator = Orchestrator::new(
            targets.iter().map(|(t, _)| t.clone()).collect(),
            self.options.orchestrator.clone(),
        );
        let mut incumbents: Vec<Option<Incumbent>> = Vec::new();
        for (target, _) in &targets {
            incumbents.push(self.restore(target, &mut orchestrator).await?);
        }
        // a target that cannot reach parity with PyTorch in its share hands its time on
        if let Some(budget) = self.options.budget {
            orchestrator.share_budget(budget);
        }
        let done: Vec<&ExperimentRecord> = self
            .log
            .rows()
            .iter()
            .filter(|r| r.decision != Decision::Baseline)
            .collect();
        if !self.log.rows().is_empty() {
            self.reporter.on_resume(&ResumeSummary {
                experiments_done: done.len() as u64,
                kept: done.iter().filter(|r| r.decision == Decision::Keep).count() as u64,
                targets_done: orchestrator
                    .states()
                    .iter()
                    .filter(|s| s.done.is_some())
                    .count(),
                targets: targets.len(),
                next_target: orchestrator.next_target().map(|t| t.id.clone()),
                max_experiments: self.options.max_experiments,
                budget: self.options.budget,
            });
        }
        let mut experiments = 0u64;
        let stop = loop {
            if interrupt.stop_requested() {
                break StopReason::Interrupted;
            }
            if self.options.budget.is_some_and(|b| started.elapsed() >= b) {
                break StopReason::Budget;
            }
            if self
                .options
                .max_experiments
                .is_some_and(|m| experiments >= m)
            {
                break StopReason::ExperimentCap;
            }
            let Some(target) = orchestrator.next_target().cloned() else {
                break StopReason::AllTargetsDone;
            };
            let index = targets
                .iter()
                .position(|(t, _)| t.id == target.id)
                .expect("orchestrator only holds given targets");
            if incumbents[index].is_none() {
                if let Some(state) = orchestrator
                    .states()
                    .iter()
                    .find(|s| s.target.id == target.id)
                {
                    self.reporter.on_target_start(state);
                }
                let starter = &targets[index].1;
                let t0 = Instant::now();
                let outcome = self.baseline(&target, starter, interrupt).await?;
                orchestrator.spend(&target.id, t0.elapsed());
                match outcome {
                    BaselineOutcome::Ready(inc) => {
                        let m = inc.result.as_ref().and_then(|r| r.metrics.as_ref());
                        orchestrator.measured(
                            &target.id,
                            m.map(|m| m.speedup_vs_reference),
                            m.and_then(|m| m.pct_peak),
                        );
                        incumbents[index] = Some(*inc);
                    }
                    BaselineOutcome::Failed(why) => {
                        orchestrator.finish(&target.id, why.clone());
                        self.reporter.on_target_end(&target, &why);
                    }
                    // not done: the loop stops (the interrupt), and a resume judges it again
                    BaselineOutcome::Interrupted => {}
                }
                continue;
            }
            let incumbent = incumbents[index].as_mut().expect("set above");
            let t0 = Instant::now();
            let outcome = self.experiment(&target, incumbent, interrupt).await?;
            experiments += u64::from(outcome.is_some());
            let Some((kept, speedup, pct, vs_pytorch)) = outcome else {
                orchestrator.finish(&target.id, MoveOn::Exhausted);
                self.reporter.on_target_end(&target, &MoveOn::Exhausted);
                continue;
            };
            if kept {
                orchestrator.measured(&target.id, vs_pytorch, pct);
            }
            if let Some(why) = orchestrator.record(&target.id, kept, speedup, pct, t0.elapsed()) {
                self.reporter.on_target_end(&target, &why);
            }
        };
        Ok(LoopOutcome {
            stop,
            experiments,
            states: orchestrator.states().to_vec(),
            projected_speedup: orchestrator.projected_speedup(),
        })
    }

    /// Logs and reverts experiments that were committed but never logged. `decided`: rows
    /// set aside whose commit has a verdict kept with it, so the loop did decide and log
    /// that experiment (a row edited since, or forged over it): not to be logged again.
    async fn reconcile(
        &mut self,
        targets: &[(Target, String)],
        decided: &[ExperimentRecord],
    ) -> Result<(), LoopError> {
        let logged: Vec<ExperimentRecord> =
            self.log.rows().iter().chain(decided).cloned().collect();
        let report = self.store.reconcile(&logged).await?;
        for (n, commit) in &report.missing_commits {
            self.reporter.on_warning(&format!(
                "results.tsv row {n} names commit {commit}, which the repository does not have"
            ));
        }
        for lost in report.unlogged {
            let kind = targets
                .iter()
                .find(|(t, _)| t.id == lost.target)
                .map(|(t, _)| t.kind);
            let Some(kind) = kind else {
                self.reporter.on_warning(&format!(
                    "experiment {} on unknown target `{}` was committed but never logged",
                    lost.experiment, lost.target
                ));
                continue;
            };
            // the process was killed between the commit and the row: not the candidate's
            // fault; its description stays the agent's (the tuner reads it back), and a
            // baseline stays a baseline row, to be judged again
            let decision = if lost.agent == STARTER_AGENT {
                Decision::Baseline
            } else {
                Decision::Revert
            };
            let mut record = unmeasured_record(
                lost.experiment,
                &lost.target,
                kind,
                &lost.agent,
                lost.description.clone(),
                Some(lost.commit.0.clone()),
                decision,
                &Correctness::Interrupted {
                    reason: "killed before its result was logged".to_string(),
                },
                0.0,
            );
            // its note then says which configuration was cut short
            record.config = self.config_at(&lost.target, &lost.commit).await;
            self.store.revert(&record).await?;
            self.log.append(record.clone())?;
            self.reporter.on_decision(&record, None);
        }
        Ok(())
    }

    /// Sets aside, with a warning each, the rows of `results.tsv` that disagree with the
    /// verdict the store kept with their commit or repeat an experiment number
    /// ([`crate::audit_rows`]). A store that cannot be read checks repeats only: a warning.
    /// Returns the rows set aside whose commit has a kept verdict (see `reconcile`).
    async fn audit(&mut self) -> Vec<ExperimentRecord> {
        let kept = match self.store.kept_verdicts().await {
            Ok(k) => k,
            Err(e) => {
                self.reporter.on_warning(&format!(
                    "cannot read the verdicts kept with earlier experiments: {e}"
                ));
                Default::default()
            }
        };
        let keeps_verdicts = kept.values().any(|k| k.correctness.is_some());
        let audit = crate::audit_rows(self.log.rows(), &kept, keeps_verdicts);
        let mut decided = Vec::new();
        for s in self.log.set_aside(audit) {
            self.reporter.on_warning(&s.to_string());
            if s.row.commit.as_ref().is_some_and(|c| kept.contains_key(c)) {
                decided.push(s.row.clone());
            }
        }
        decided
    }

    /// Gives the rows of earlier invocations back what `results.tsv` has no column for:
    /// what the store kept with each experiment ([`VersionStore::recall`]: head-to-head,
    /// configuration), and for a benchmarked row still without a configuration (a workspace
    /// written before they were kept), the one its commit's `kernel.py` declares. A failure
    /// costs only knowledge (a tuner may measure a configuration again): a warning.
    async fn recall(&mut self) {
        if let Err(e) = self.store.recall(self.log.rows_mut()).await {
            self.reporter.on_warning(&format!(
                "cannot read the notes of earlier experiments: {e}"
            ));
        }
        for i in 0..self.log.rows().len() {
            let row = &self.log.rows()[i];
            if row.config.is_some() || row.decision == Decision::Invalid {
                continue;
            }
            let Some(commit) = row.commit.clone().map(CommitId) else {
                continue;
            };
            let target = row.target.clone();
            let config = self.config_at(&target, &commit).await;
            self.log.rows_mut()[i].config = config;
        }
    }

    /// The configuration of the `kernel.py` that `commit` holds, when the store still has
    /// it and it declares one.
    async fn config_at(&self, target_id: &str, commit: &CommitId) -> Option<KernelConfig> {
        match self.store.source_at(target_id, commit).await {
            Ok(source) => source.as_deref().and_then(KernelConfig::read),
            Err(e) => {
                self.reporter.on_warning(&format!(
                    "cannot read the kernel.py of commit {commit}: {e}"
                ));
                None
            }
        }
    }

    /// Rebuilds a target's incumbent and orchestrator state from earlier rows, if any.
    async fn restore(
        &mut self,
        target: &Target,
        orchestrator: &mut Orchestrator,
    ) -> Result<Option<Incumbent>, LoopError> {
        let rows = self.target_rows(&target.id);
        // the last baseline with a verdict: one cut short (INTERRUPTED, or NOT_RUN in a
        // workspace made before that word) is judged again, so the target is not done
        let Some(baseline) = rows
            .iter()
            .rev()
            .find(|r| r.decision == Decision::Baseline && r.correctness.is_judged())
        else {
            return Ok(None);
        };
        if !baseline.correctness.is_pass() {
            orchestrator.finish(
                &target.id,
                MoveOn::BaselineFailed(format!("baseline verdict {}", baseline.correctness)),
            );
            return Ok(None);
        }
        let Some((_, source)) = self.store.best(target).await? else {
            return Ok(None);
        };
        let base = baseline.latency_us;
        let mut eval_s = Some(baseline.duration_s).filter(|d| *d > 0.0);
        orchestrator.spend(
            &target.id,
            Duration::from_secs_f64(baseline.duration_s.max(0.0)),
        );
        orchestrator.measured(&target.id, baseline.speedup_vs_reference, baseline.pct_peak);
        // an experiment cut short measured nothing: it does not count toward the plateau
        for r in rows
            .iter()
            .filter(|r| r.decision != Decision::Baseline && r.correctness.is_judged())
        {
            if r.decision == Decision::Keep && r.duration_s > 0.0 {
                eval_s = Some(r.duration_s);
            }
            let kept = r.decision == Decision::Keep;
            if kept {
                orchestrator.measured(&target.id, r.speedup_vs_reference, r.pct_peak);
            }
            let speedup = match (base, r.latency_us) {
                (Some(b), Some(l)) if l > 0.0 => Some(b / l),
                _ => None,
            };
            orchestrator.record(
                &target.id,
                kept,
                speedup,
                r.pct_peak,
                Duration::from_secs_f64(r.duration_s.max(0.0)),
            );
        }
        Ok(Some(Incumbent {
            source,
            result: None,
            baseline_latency_us: base,
            eval_s,
        }))
    }

    /// The time limit of a candidate's bench request, from the incumbent's own evaluation
    /// time when [`LoopOptions::scale_timeout`] is set.
    fn candidate_timeout(&self, incumbent: &Incumbent) -> Duration {
        match (self.options.scale_timeout, incumbent.eval_s) {
            (Some(scale), Some(s)) => scale.limit(s, self.options.bench_timeout),
            _ => self.options.bench_timeout,
        }
    }

    fn bench_request(&self, target: &Target, path: PathBuf) -> BenchRequest {
        BenchRequest {
            kernel_path: path,
            kind: Some(target.kind),
            device: self.options.device,
            extra_shapes: target.shapes.clone(),
            timing: target.shapes.first().map(|s| (s.clone(), target.dtype)),
            dtypes: vec![target.dtype],
            quick: false,
            time_compiled: false,
            layout: target.layout,
            params: target.params.clone(),
            timeout: self.options.bench_timeout,
        }
    }

    /// Commits and benches the starter: the baseline row.
    async fn baseline(
        &mut self,
        target: &Target,
        starter: &str,
        interrupt: &Interrupt,
    ) -> Result<BaselineOutcome, LoopError> {
        let n = self.log.next_experiment();
        let t0 = Instant::now();
        self.reporter.on_experiment_start(target, n);
        self.reporter.on_phase(target, n, Phase::Baseline);
        let agent = STARTER_AGENT.to_string();
        let description = match &self.options.baseline_source {
            Some(from) => format!("baseline: {} kernel from {from}", target.kind),
            None => format!("baseline: {} starter kernel", target.kind),
        };
        let commit = self
            .store
            .commit(&ExperimentDraft {
                experiment: n,
                target,
                description: &description,
                agent: &agent,
                source: starter,
            })
            .await?;
        let request = self.bench_request(target, self.store.kernel_path(target));
        let bench_t0 = Instant::now();
        let result = self.bench_or_abandon(&request, starter, interrupt).await?;
        let eval_s = bench_t0.elapsed().as_secs_f64();
        let record = self.record(
            n,
            target,
            &agent,
            &description,
            Some(commit.0),
            Decision::Baseline,
            &result,
            starter,
            t0,
        );
        if let Correctness::Interrupted { .. } = result.correctness {
            // no verdict: taken off the branch, and judged again when the run resumes
            self.store.revert(&record).await?;
            self.log.append(record.clone())?;
            self.reporter.on_decision(&record, Some(&result));
            return Ok(BaselineOutcome::Interrupted);
        }
        // the baseline stays on the branch even when it fails: it is the target's start
        self.store.keep(&record).await?;
        self.log.append(record.clone())?;
        self.reporter.on_decision(&record, Some(&result));
        if !result.correctness.is_pass() {
            let why = format!(
                "baseline {}{}",
                result.correctness.label(),
                result
                    .correctness
                    .reason()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default()
            );
            return Ok(BaselineOutcome::Failed(MoveOn::BaselineFailed(why)));
        }
        Ok(BaselineOutcome::Ready(Box::new(Incumbent {
            source: starter.to_string(),
            baseline_latency_us: result.metrics.as_ref().map(|m| m.latency_us),
            result: Some(result),
            eval_s: Some(eval_s),
        })))
    }

    /// Benches, or returns `INTERRUPTED` when a second Ctrl-C abandons the request.
    async fn bench_or_abandon(
        &mut self,
        request: &BenchRequest,
        source: &str,
        interrupt: &Interrupt,
    ) -> Result<BenchResult, LoopError> {
        let result = tokio::select! {
            r = self.bench.bench(request) => r?,
            _ = interrupt.abandoned() => {
                return Ok(BenchResult {
                    kind: request.kind,
                    correctness: Correctness::Interrupted {
                        reason: ABANDONED_REASON.to_string(),
                    },
                    stages: vec![],
                    metrics: None,
                    device: String::new(),
                    timing_representative: false,
                    source_sha256: String::new(),
                });
            }
        };
        let expected = sha256_hex(source);
        if result.correctness.is_pass() && result.source_sha256 != expected {
            return Ok(BenchResult {
                correctness: Correctness::Tamper {
                    reason: format!(
                        "the worker ran source {} but the committed kernel.py is {}",
                        result.source_sha256, expected
                    ),
                },
                ..result
            });
        }
        Ok(result)
    }

    #[allow(clippy::too_many_arguments)]
    fn record(
        &self,
        n: u64,
        target: &Target,
        agent: &str,
        description: &str,
        commit: Option<String>,
        decision: Decision,
        result: &BenchResult,
        source: &str,
        t0: Instant,
    ) -> ExperimentRecord {
        let m = result.metrics.as_ref();
        ExperimentRecord {
            experiment: n,
            timestamp: now_rfc3339(),
            target: target.id.clone(),
            kind: target.kind,
            agent: agent.to_string(),
            // the terminal prints it too: no control characters from an LLM's reply
            description: crate::results::one_line(description),
            commit,
            decision,
            correctness: result.correctness.verdict(),
            latency_us: m.map(|m| m.latency_us),
            throughput: m.map(|m| m.throughput),
            throughput_unit: m.map(|m| m.throughput_unit.clone()).unwrap_or_default(),
            pct_peak: m.and_then(|m| m.pct_peak),
            speedup_vs_reference: m.map(|m| m.speedup_vs_reference),
            peak_vram_mb: m.map(|m| m.peak_vram_mb),
            duration_s: t0.elapsed().as_secs_f64(),
            head_to_head: None,
            bench_samples_us: m.map(|m| m.samples_us.clone()).unwrap_or_default(),
            bench_reference_samples_us: m
                .map(|m| m.reference_samples_us.clone())
                .unwrap_or_default(),
            // the tuner reads what was measured from here (and the note), not the description
            config: KernelConfig::read(source),
        }
    }

    /// Logs experiment `n` as an `invalid` row (nothing committed or measured) for `reason`,
    /// which the agent sees among its failures.
    fn log_invalid(
        &mut self,
        n: u64,
        target: &Target,
        agent: &str,
        reason: String,
        t0: Instant,
    ) -> Result<(), LoopError> {
        let record = self.log_unmeasured(n, target, agent, reason.clone(), t0)?;
        self.failures.push((n, reason));
        self.agent.observe(&record);
        Ok(())
    }

    /// Appends experiment `n` as an `invalid` row with `description` (nothing committed or
    /// measured) and tells the reporter; returns the row.
    fn log_unmeasured(
        &mut self,
        n: u64,
        target: &Target,
        agent: &str,
        description: String,
        t0: Instant,
    ) -> Result<ExperimentRecord, LoopError> {
        let record = unmeasured_record(
            n,
            &target.id,
            target.kind,
            agent,
            description,
            None,
            Decision::Invalid,
            &Correctness::NotRun,
            t0.elapsed().as_secs_f64(),
        );
        self.log.append(record.clone())?;
        self.reporter.on_decision(&record, None);
        Ok(record)
    }

    /// One experiment. Returns `None` when the agent is exhausted, else whether it was kept,
    /// the new speedup over the baseline and % of peak.
    async fn experiment(
        &mut self,
        target: &Target,
        incumbent: &mut Incumbent,
        interrupt: &Interrupt,
    ) -> Result<Option<Outcome>, LoopError> {
        let n = self.log.next_experiment();
        let t0 = Instant::now();
        self.reporter.on_experiment_start(target, n);
        self.reporter.on_phase(target, n, Phase::Proposing);
        let history = self.target_rows(&target.id);
        let context = ProposalContext {
            target,
            gpu: self.options.gpu.as_ref(),
            best_source: &incumbent.source,
            best_result: incumbent.result.as_ref(),
            history: &history,
            failures: &self.failures,
            experiment: n,
        };
        // A stop request cuts the agent's wait short (an LLM's reply can take minutes, and a
        // `docker stop` waits ten seconds): nothing was committed or measured yet.
        let proposal = tokio::select! {
            p = self.agent.propose(&context) => Some(p),
            () = interrupt.stopped() => None,
        };
        let agent = self.agent.name();
        let Some(proposal) = proposal else {
            self.log_invalid(n, target, &agent, INTERRUPTED_PROPOSING.to_string(), t0)?;
            return Ok(Some((false, None, None, None)));
        };
        let proposal = match proposal {
            Ok(p) => p,
            Err(e) => {
                // The agent cannot go on, but it attempted experiment n (an LLM agent gives
                // up on the request that completes a streak of failures): log it as an
                // `invalid` row carrying the error, so that results.tsv has every attempt
                // and says why the run stopped. Nothing was committed or benched.
                self.log_unmeasured(n, target, &agent, e.to_string(), t0)?;
                return Err(e.into());
            }
        };
        let (description, source) = match proposal {
            Proposal::Exhausted => return Ok(None),
            invalid @ Proposal::Invalid { .. } => {
                let reason = invalid.invalid_reason().unwrap_or_default();
                self.log_invalid(n, target, &agent, reason, t0)?;
                return Ok(Some((false, None, None, None)));
            }
            Proposal::Candidate {
                description,
                source,
                ..
            } => (description, source),
        };
        if source == incumbent.source {
            // Judging it again would measure the best against itself: noise, and at worst
            // a "keep" of nothing. The agent hears of it through its failures.
            let reason = format!("{UNCHANGED_REASON}: {description}");
            self.log_invalid(n, target, &agent, reason, t0)?;
            return Ok(Some((false, None, None, None)));
        }
        self.reporter.on_candidate(target, n, &description);
        self.reporter.on_phase(target, n, Phase::Judging);
        // The store overwrites kernel.py; keep the incumbent's bytes for the comparison.
        let incumbent_path = self
            .options
            .scratch_dir
            .join(format!("{}-incumbent.py", target.id));
        std::fs::create_dir_all(&self.options.scratch_dir)
            .and_then(|_| std::fs::write(&incumbent_path, &incumbent.source))
            .map_err(|source| LoopError::Scratch {
                path: incumbent_path.clone(),
                source,
            })?;
        let commit = self
            .store
            .commit(&ExperimentDraft {
                experiment: n,
                target,
                description: &description,
                agent: &agent,
                source: &source,
            })
            .await?;
        let candidate_path = self.store.kernel_path(target);
        let mut request = self.bench_request(target, candidate_path.clone());
        request.timeout = self.candidate_timeout(incumbent);
        let bench_t0 = Instant::now();
        let result = match self.bench_or_abandon(&request, &source, interrupt).await {
            Ok(r) => r,
            Err(e) => {
                // the harness broke: leave the repository and the log consistent, then stop
                let record = self.record(
                    n,
                    target,
                    &agent,
                    &format!("harness error: {e}"),
                    Some(commit.0.clone()),
                    Decision::Revert,
                    &crash_result(target, &e.to_string()),
                    &source,
                    t0,
                );
                self.store.revert(&record).await?;
                self.log.append(record)?;
                return Err(e);
            }
        };
        let eval_s = bench_t0.elapsed().as_secs_f64();
        let comparison = match (&result.correctness, &result.metrics) {
            (Correctness::Pass, Some(m)) if !interrupt.abandon_requested() => {
                self.reporter.on_phase(target, n, Phase::Comparing);
                let req = CompareRequest {
                    incumbent: incumbent_path.clone(),
                    candidate: candidate_path,
                    kind: target.kind,
                    device: self.options.device,
                    timing: (m.shape.clone(), m.dtype),
                    repetitions: self.options.compare_repetitions,
                    layout: target.layout,
                    params: target.params.clone(),
                    timeout: self.options.bench_timeout,
                };
                // a second interrupt during the head-to-head abandons it as well; one too
                // noisy to decide (something else ran on the GPU or the host meanwhile) is
                // run again rather than decided, up to `keep::NOISY_RETRIES` times
                let mut retries = 0;
                let compared = loop {
                    let compared = tokio::select! {
                        r = self.bench.compare(&req) => Some(r),
                        _ = interrupt.abandoned() => None,
                    };
                    match compared {
                        Some(Ok(mut c))
                            if result.timing_representative
                                && c.spread > keep::MAX_SPREAD
                                && retries < keep::NOISY_RETRIES =>
                        {
                            retries += 1;
                            self.reporter.on_warning(&format!(
                                "experiment {n}: head-to-head too noisy (spread {:.0}% over {} repetitions), timing it again ({retries} of {})",
                                c.spread * 100.0,
                                c.repetitions,
                                keep::NOISY_RETRIES
                            ));
                            c.retries = retries;
                        }
                        Some(Ok(mut c)) => {
                            c.retries = retries;
                            break Some(Ok(c));
                        }
                        other => break other,
                    }
                };
                match compared {
                    Some(Ok(c)) => Some(c),
                    Some(Err(e)) => {
                        self.reporter.on_warning(&format!(
                            "experiment {n}: head-to-head timing failed: {e}"
                        ));
                        None
                    }
                    None => None,
                }
            }
            _ => None,
        };
        let mut verdict = decide(&result, comparison.as_ref(), self.options.keep_threshold);
        // abandoned in the bench or after it (during the head-to-head): never kept, and
        // INTERRUPTED in the row, not the candidate's verdict
        let mut result = result;
        if interrupt.abandon_requested() {
            if !matches!(result.correctness, Correctness::Interrupted { .. }) {
                result.correctness = Correctness::Interrupted {
                    reason: ABANDONED_REASON.to_string(),
                };
            }
            verdict = KeepVerdict::Revert {
                reason: ABANDONED_REASON.to_string(),
            };
        }
        let abandoned = matches!(result.correctness, Correctness::Interrupted { .. });
        let (decision, kept) = match &verdict {
            KeepVerdict::Keep { .. } if !abandoned => (Decision::Keep, true),
            KeepVerdict::Keep { .. } => (Decision::Revert, false),
            KeepVerdict::Revert { reason } => {
                tracing::debug!(experiment = n, %reason, "revert");
                (Decision::Revert, false)
            }
        };
        let mut record = self.record(
            n,
            target,
            &agent,
            &description,
            Some(commit.0),
            decision,
            &result,
            &source,
            t0,
        );
        record.head_to_head = comparison.clone();
        if kept {
            self.store.keep(&record).await?;
        } else {
            self.store.revert(&record).await?;
        }
        self.log.append(record.clone())?;
        // an experiment cut short says nothing about the candidate: not one of its failures
        if let Some(reason) = result.correctness.reason().filter(|_| !abandoned) {
            let stage = result
                .correctness
                .failed_stage()
                .map(|s| format!("{s}: "))
                .unwrap_or_default();
            self.failures
                .push((n, format!("{} {stage}{reason}", result.correctness.label())));
        }
        self.agent.observe(&record);
        self.reporter.on_verdict(n, &verdict);
        self.reporter.on_decision(&record, Some(&result));
        let _ = std::fs::remove_file(&incumbent_path);
        if !kept {
            return Ok(Some((false, None, None, None)));
        }
        let latency = result.metrics.as_ref().map(|m| m.latency_us);
        let pct = result.metrics.as_ref().and_then(|m| m.pct_peak);
        let vs_pytorch = result.metrics.as_ref().map(|m| m.speedup_vs_reference);
        let speedup = match (incumbent.baseline_latency_us, latency) {
            (Some(b), Some(l)) if l > 0.0 => Some(b / l),
            _ => None,
        };
        incumbent.source = source;
        incumbent.result = Some(result);
        incumbent.eval_s = Some(eval_s);
        Ok(Some((true, speedup, pct, vs_pytorch)))
    }
}

/// An experiment's outcome for the orchestrator: kept, the speedup over the baseline, the
/// % of the roofline and the speedup over PyTorch (the last three of a kept kernel only).
type Outcome = (bool, Option<f64>, Option<f64>, Option<f64>);

/// The agent name of a target's baseline row: its starting kernel, nobody's proposal.
pub const STARTER_AGENT: &str = "starter";

/// The reason of an experiment abandoned by a second Ctrl-C or SIGTERM
/// ([`Correctness::Interrupted`]).
pub const ABANDONED_REASON: &str = "abandoned by a second Ctrl-C or SIGTERM";

/// The description of an experiment interrupted (Ctrl-C, SIGTERM) while the agent was
/// proposing it: logged `invalid`, neither committed nor measured.
pub const INTERRUPTED_PROPOSING: &str =
    "interrupted while the agent was proposing: nothing committed or measured";

/// The start of the description of an experiment whose proposal was the best `kernel.py`
/// unchanged, byte for byte: logged `invalid`, neither committed nor measured.
pub const UNCHANGED_REASON: &str = "unchanged: the proposal is the best kernel.py as it is";

/// A row without measurements: an invalid proposal, or an experiment found committed but
/// never logged.
#[allow(clippy::too_many_arguments)]
fn unmeasured_record(
    experiment: u64,
    target: &str,
    kind: crate::KernelKind,
    agent: &str,
    description: String,
    commit: Option<String>,
    decision: Decision,
    correctness: &Correctness,
    duration_s: f64,
) -> ExperimentRecord {
    ExperimentRecord {
        experiment,
        timestamp: now_rfc3339(),
        target: target.to_string(),
        kind,
        agent: agent.to_string(),
        description,
        commit,
        decision,
        correctness: correctness.verdict(),
        latency_us: None,
        throughput: None,
        throughput_unit: String::new(),
        pct_peak: None,
        speedup_vs_reference: None,
        peak_vram_mb: None,
        duration_s,
        head_to_head: None,
        bench_samples_us: Vec::new(),
        bench_reference_samples_us: Vec::new(),
        config: None,
    }
}

fn crash_result(target: &Target, reason: &str) -> BenchResult {
    BenchResult {
        kind: Some(target.kind),
        correctness: Correctness::Crash {
            reason: reason.to_string(),
        },
        stages: vec![],
        metrics: None,
        device: String::new(),
        timing_representative: false,
        source_sha256: String::new(),
    }
}

#[cfg(test)]
mod tests;
