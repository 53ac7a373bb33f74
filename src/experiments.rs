//! The edit → benchmark → keep-or-revert loop over a workspace's targets, with the default
//! benchmarker and store: what `run` and `tune` share once they have a plan.

use std::sync::Arc;

use autokernel_core::{
    lookup_gpu, Agent, ExperimentRecord, Interrupt, LoopOutcome, OptimizationLoop, Reporter,
    ResultsLog, StopReason, Target,
};

use crate::services::Services;
use crate::settings::LoopSettings;
use crate::workspace::Workspace;

/// Each target with the source of its baseline `kernel.py`.
#[derive(Debug, Clone)]
pub struct Baselines {
    /// The targets and their starting sources.
    pub kernels: Vec<(Target, String)>,
    /// Where those sources come from when they are not a model's starters (`tune`'s file),
    /// for the baseline rows' description; set, the targets are no model's.
    pub from: Option<String>,
}

impl Baselines {
    /// Each target starting from the bundled starter of its kind.
    pub fn starters(targets: &[Target]) -> Self {
        Baselines {
            kernels: targets
                .iter()
                .map(|t| {
                    (
                        t.clone(),
                        autokernel_bench::starter_source(t.kind).to_string(),
                    )
                })
                .collect(),
            from: None,
        }
    }
}

/// What a finished loop hands back.
#[derive(Debug)]
pub struct Experiments {
    /// Why it stopped and how many experiments ran.
    pub outcome: LoopOutcome,
    /// Every row of `results.tsv`, earlier invocations included, each with the head-to-head
    /// figures kept in its experiment's note.
    pub rows: Vec<ExperimentRecord>,
}

impl Experiments {
    /// Whether any row of the workspace passed the judge.
    pub fn any_passed(&self) -> bool {
        self.rows.iter().any(|r| r.correctness.is_pass())
    }

    /// Whether the loop stopped on an interrupt (Ctrl-C, SIGTERM, [`Interrupt::request`]).
    pub fn interrupted(&self) -> bool {
        self.outcome.stop == StopReason::Interrupted
    }
}

/// Runs the loop over the baselines' targets on the workspace: the default benchmarker on
/// `services`' worker, `store`, `agent`, the settings resolved against the workspace's
/// ([`LoopSettings::options`]). `interrupt` stops it after the experiment in flight (a
/// second request abandons that one).
///
/// # Errors
/// When `results.tsv` cannot be opened or the loop fails (the store, the log).
#[allow(clippy::too_many_arguments)] // each is one of the loop's parts, named at the call
pub async fn run_experiments(
    ws: &Workspace,
    settings: &LoopSettings,
    services: &Services,
    agent: Box<dyn Agent>,
    store: autokernel_vcs::GixStore,
    baselines: Baselines,
    reporter: Box<dyn Reporter>,
    interrupt: &Interrupt,
) -> anyhow::Result<Experiments> {
    let log = ResultsLog::open(ws.path("results.tsv"))?;
    if log.repaired_torn_line() {
        tracing::warn!("results.tsv had a torn last row (a killed run); it was cut off and saved to results.tsv.torn");
    }
    let mut options = settings.options(ws);
    options.baseline_source = baselines.from;
    options.gpu = services
        .gpu_name
        .as_deref()
        .and_then(|n| lookup_gpu(n).spec().cloned());
    let mut the_loop = OptimizationLoop::new(agent, services.benchmarker(), store, log, options)
        .with_reporter(reporter);
    let outcome = the_loop.run(baselines.kernels, interrupt).await?;
    // rows of earlier invocations get back the head-to-head figures kept in their notes
    let mut rows = the_loop.log().rows().to_vec();
    ws.merge_notes(&mut rows);
    Ok(Experiments { outcome, rows })
}

/// Lets the loop own a boxed reporter while its caller keeps a handle to the same one (to
/// finish its progress bar, or to report the steps around the loop).
pub struct SharedReporter<R: ?Sized>(pub Arc<R>);

impl<R: Reporter + ?Sized> Reporter for SharedReporter<R> {
    fn on_target_start(&self, s: &autokernel_core::TargetState) {
        self.0.on_target_start(s)
    }
    fn on_experiment_start(&self, t: &Target, n: u64) {
        self.0.on_experiment_start(t, n)
    }
    fn on_candidate(&self, t: &Target, n: u64, d: &str) {
        self.0.on_candidate(t, n, d)
    }
    fn on_phase(&self, t: &Target, n: u64, p: autokernel_core::Phase) {
        self.0.on_phase(t, n, p)
    }
    fn on_resume(&self, s: &autokernel_core::ResumeSummary) {
        self.0.on_resume(s)
    }
    fn on_verdict(&self, n: u64, v: &autokernel_core::keep::KeepVerdict) {
        self.0.on_verdict(n, v)
    }
    fn on_decision(&self, r: &ExperimentRecord, b: Option<&autokernel_core::BenchResult>) {
        self.0.on_decision(r, b)
    }
    fn on_target_end(&self, t: &Target, w: &autokernel_core::MoveOn) {
        self.0.on_target_end(t, w)
    }
    fn on_warning(&self, m: &str) {
        self.0.on_warning(m)
    }
}
