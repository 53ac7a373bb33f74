//! Progress on stderr: an indicatif spinner for the experiment in flight (its number, the
//! target, the phase, and how much of the cap or the budget is left) and one line per
//! decision. Without a terminal (a log file, CI) the spinner is not drawn and each phase
//! change prints a line instead. `--quiet` hides everything but errors; the decision lines
//! also go to the log.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use autokernel_core::keep::KeepVerdict;
use autokernel_core::{
    BenchResult, Decision, ExperimentRecord, MoveOn, Phase, Reporter, ResumeSummary, Target,
    TargetState,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use autokernel::job::{JobReporter, Step};

use crate::global_args::GlobalArgs;
use autokernel::numfmt::latency_us;

/// What `run` does at the steps of its job besides drawing them: the `plan:` line goes to
/// stdout or, with `--json`, stderr; the loop's start and end run the command's signal
/// handling changes.
pub struct StepHooks {
    global: GlobalArgs,
    json: bool,
    on_loop_start: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    on_loop_end: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    spinner: Mutex<Option<ProgressBar>>,
}

impl StepHooks {
    /// Hooks for `run`: `on_loop_start` and `on_loop_end` run once each.
    pub fn new(
        global: &GlobalArgs,
        json: bool,
        on_loop_start: impl FnOnce() + Send + 'static,
        on_loop_end: impl FnOnce() + Send + 'static,
    ) -> Self {
        StepHooks {
            global: global.clone(),
            json,
            on_loop_start: Mutex::new(Some(Box::new(on_loop_start))),
            on_loop_end: Mutex::new(Some(Box::new(on_loop_end))),
            spinner: Mutex::new(None),
        }
    }

    fn spin(&self, message: &str) {
        let bar = spinner(&self.global, message);
        if let Some(old) = lock(&self.spinner).replace(bar) {
            old.finish_and_clear();
        }
    }

    fn stop_spinning(&self) {
        if let Some(bar) = lock(&self.spinner).take() {
            bar.finish_and_clear();
        }
    }
}

/// The mutex's value, also after a panic elsewhere poisoned it (progress is best effort).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Draws the loop's progress.
pub struct ProgressReporter {
    bar: ProgressBar,
    quiet: bool,
    /// No spinner can be drawn (stderr is no terminal, or bars are off): a line per phase.
    phase_lines: bool,
    /// The keep rule's word on the experiment being decided, shown on its line.
    verdict: Mutex<Option<(u64, String)>>,
    /// The description of the candidate being judged.
    candidate: Mutex<String>,
    /// Whether the targets are a model's, with a share of its time to show (not `tune`'s).
    model_shares: bool,
    /// This invocation's experiment cap, if any.
    max_experiments: Option<u64>,
    /// This invocation's budget, if any, and when it started.
    budget: Option<(Duration, Instant)>,
    /// Experiments started in this invocation, baselines not counted.
    started_here: AtomicU64,
    /// The job's steps around the loop (`run`), if this reporter shows them.
    steps: Option<StepHooks>,
}

/// Whether bars may be drawn.
pub fn bars_enabled(global: &GlobalArgs) -> bool {
    !global.quiet && !global.no_progress && global.verbose == 0 && std::io::stderr().is_terminal()
}

/// A spinner with `message`, hidden when bars are disabled; then, unless `--quiet`, the
/// message is printed once as a line, so that a log of a long step (a verification, a
/// profile) says what is running.
pub fn spinner(global: &GlobalArgs, message: &str) -> ProgressBar {
    let bar = ticking_bar(global);
    if bar.is_hidden() && !global.quiet {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{message}…");
        }
    }
    bar.set_message(message.to_string());
    bar
}

/// A ticking spinner with the elapsed time, or a hidden one when bars are disabled.
fn ticking_bar(global: &GlobalArgs) -> ProgressBar {
    let bar = if bars_enabled(global) {
        ProgressBar::new_spinner()
    } else {
        ProgressBar::with_draw_target(None, ProgressDrawTarget::hidden())
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} {elapsed:>4} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    bar.enable_steady_tick(Duration::from_millis(120));
    bar
}

/// A duration as people read it: `45s`, `12m04s`, `2h05m`.
pub fn human_duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

impl ProgressReporter {
    /// A reporter following the global flags, for a model's targets.
    pub fn new(global: &GlobalArgs) -> Self {
        let bar = ticking_bar(global);
        ProgressReporter {
            phase_lines: bar.is_hidden() && !global.quiet,
            bar,
            quiet: global.quiet,
            verdict: Mutex::new(None),
            candidate: Mutex::new(String::new()),
            model_shares: true,
            max_experiments: None,
            budget: None,
            started_here: AtomicU64::new(0),
            steps: None,
        }
    }

    /// Shows the job's steps too (`run`).
    pub fn with_steps(mut self, hooks: StepHooks) -> Self {
        self.steps = Some(hooks);
        self
    }

    /// Removes a step's spinner left by a job that failed mid-step.
    pub fn clear_step(&self) {
        if let Some(hooks) = &self.steps {
            hooks.stop_spinning();
        }
    }

    /// The same for targets that are no model's (`tune`): no share of model time to show.
    pub fn without_model(mut self) -> Self {
        self.model_shares = false;
        self
    }

    /// Shows how much of this invocation's experiment cap and budget is left.
    pub fn with_limits(mut self, max_experiments: Option<u64>, budget: Option<Duration>) -> Self {
        self.max_experiments = max_experiments;
        self.budget = budget.map(|b| (b, Instant::now()));
        self
    }

    fn line(&self, text: String) {
        tracing::info!("{text}");
        if self.quiet {
            return;
        }
        if self.bar.is_hidden() {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("{text}");
            }
        } else {
            self.bar.println(text);
        }
    }

    /// `3 of 10 this run, 12m04s of the budget left`, or empty without a cap or budget.
    fn limits_text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(cap) = self.max_experiments {
            parts.push(format!(
                "{} of {cap} this run",
                self.started_here.load(Ordering::SeqCst)
            ));
        }
        if let Some((budget, t0)) = self.budget {
            parts.push(format!(
                "{} of the budget left",
                human_duration(budget.saturating_sub(t0.elapsed()))
            ));
        }
        parts.join(", ")
    }

    /// Removes the spinner.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
}

impl JobReporter for ProgressReporter {
    fn on_step(&self, step: Step<'_>) {
        let Some(hooks) = &self.steps else {
            return;
        };
        match step {
            Step::Profiling { model } => hooks.spin(&format!("profiling {model}")),
            Step::Profiled {
                trace,
                not_planned,
                unmatched_sites,
            } => {
                hooks.stop_spinning();
                if self.quiet {
                    return;
                }
                #[allow(clippy::print_stderr)]
                {
                    eprintln!("{}", trace.table(15));
                }
                if !not_planned.is_empty() {
                    let list: Vec<String> = not_planned
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
                if let Some(line) = autokernel_profiler::no_kind_ops_text(&trace.report) {
                    #[allow(clippy::print_stderr)]
                    {
                        eprintln!("{line}");
                    }
                }
                if let Some(text) =
                    autokernel_profiler::not_planned_call_sites_text(unmatched_sites)
                {
                    #[allow(clippy::print_stderr)]
                    {
                        eprintln!("{text}");
                    }
                }
            }
            Step::Planned { targets } => crate::output::print_info(
                hooks.json,
                &format!(
                    "plan: {} target(s): {}",
                    targets.len(),
                    targets
                        .iter()
                        .map(|t| match t.expected_saving() {
                            Some(saving) => format!("{} (saves ≤ {:.1}%)", t.id, saving * 100.0),
                            None => t.id.clone(),
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ),
            Step::BudgetSplit {
                budget,
                profile,
                loop_budget,
                verify,
                report,
            } => {
                let verify = verify.map_or_else(
                    || "no verification".to_string(),
                    |v| format!("verification {}", human_duration(v)),
                );
                self.line(format!(
                    "budget {}: profile {} (taken), loop {}, {verify}, report {}",
                    human_duration(budget),
                    human_duration(profile),
                    human_duration(loop_budget),
                    human_duration(report)
                ));
            }
            Step::Experiments => {
                if let Some(hook) = lock(&hooks.on_loop_start).take() {
                    hook();
                }
            }
            Step::ExperimentsOver => {
                if let Some(hook) = lock(&hooks.on_loop_end).take() {
                    hook();
                }
                self.finish();
            }
            Step::Verifying => hooks.spin("verifying the kept kernels inside the model"),
            Step::VerifyProgress(p) => {
                // as the loop's phases: a line each without a terminal, else the spinner's
                let line = p.line();
                tracing::debug!("{line}");
                if self.phase_lines {
                    #[allow(clippy::print_stderr)]
                    {
                        eprintln!("{line}");
                    }
                } else if let Some(bar) = lock(&hooks.spinner).as_ref() {
                    bar.set_message(line);
                }
            }
            Step::VerifyingOver => hooks.stop_spinning(),
            _ => {}
        }
    }
}

/// The line of a decided experiment. A compared candidate shows the head-to-head figures
/// that decided it (the best's µs → the candidate's µs, their median ratio and spread), so
/// that the line never contradicts its decision; an uncompared one (a baseline, a failure)
/// shows its own timing. `rule`: the keep rule's word on a reverted PASS.
pub fn decision_line(
    r: &ExperimentRecord,
    result: Option<&BenchResult>,
    rule: Option<&str>,
) -> String {
    let timing = match (&r.head_to_head, r.latency_us, r.speedup_vs_reference) {
        (Some(h), _, _) => {
            let spread = if h.spread.is_finite() {
                format!(", spread {:.1}%", h.spread * 100.0)
            } else {
                String::new()
            };
            // the candidate at the median paired ratio: the figures the rule decided on
            format!(
                " head to head {} → {} µs ({:.3}x the best{spread})",
                latency_us(h.incumbent_latency_us),
                latency_us(h.decided_candidate_us()),
                h.median_speedup
            )
        }
        (None, Some(l), Some(s)) => format!(" {} µs, {s:.2}x vs PyTorch", latency_us(l)),
        (None, Some(l), None) => format!(" {} µs", latency_us(l)),
        _ => String::new(),
    };
    let why = result
        .and_then(|res| {
            res.correctness.reason().map(|reason| {
                format!(
                    " ({}{})",
                    res.correctness
                        .failed_stage()
                        .map(|s| format!("{s}: "))
                        .unwrap_or_default(),
                    first_line(reason)
                )
            })
        })
        .unwrap_or_default();
    // a PASS that was reverted says why (a failing one already did, above)
    let rule = match rule {
        Some(text) if why.is_empty() && r.decision == Decision::Revert => format!(" ({text})"),
        _ => String::new(),
    };
    let mark = match r.decision {
        Decision::Keep => "keep    ",
        Decision::Revert => "revert  ",
        Decision::Baseline => "baseline",
        Decision::Invalid => "invalid ",
    };
    format!(
        "[{:>3}] {mark} {} {}{timing}{why}{rule} · {}",
        r.experiment, r.target, r.correctness, r.description
    )
}

impl Reporter for ProgressReporter {
    fn on_target_start(&self, state: &TargetState) {
        let t = &state.target;
        if !self.model_shares {
            self.line(format!("── target {} ({}, from {})", t.id, t.kind, t.op));
            return;
        }
        self.line(format!(
            "── target {} ({}, {:.1}% of model time, from {})",
            t.id,
            t.kind,
            t.fraction * 100.0,
            t.op
        ));
    }

    fn on_candidate(&self, _target: &Target, _experiment: u64, description: &str) {
        if let Ok(mut slot) = self.candidate.lock() {
            *slot = description.to_string();
        }
    }

    fn on_phase(&self, target: &Target, experiment: u64, phase: Phase) {
        if phase == Phase::Proposing {
            self.started_here.fetch_add(1, Ordering::SeqCst);
        }
        let what = match phase {
            Phase::Baseline => "baseline: judging the starting kernel".to_string(),
            Phase::Judging | Phase::Comparing => {
                let description = self.candidate.lock().map(|d| d.clone()).unwrap_or_default();
                format!("{}: `{description}`", phase.label())
            }
            Phase::Proposing => phase.label().to_string(),
        };
        let limits = self.limits_text();
        let limits = if limits.is_empty() {
            String::new()
        } else {
            format!(" · {limits}")
        };
        let message = format!("experiment {experiment} on {}: {what}{limits}", target.id);
        tracing::debug!("{message}");
        if self.phase_lines {
            #[allow(clippy::print_stderr)]
            {
                eprintln!("{message}");
            }
        } else {
            self.bar.set_message(message);
        }
    }

    fn on_resume(&self, s: &ResumeSummary) {
        let mut limits = Vec::new();
        if let Some(cap) = s.max_experiments {
            limits.push(format!("up to {cap} experiments"));
        }
        if let Some(b) = s.budget {
            limits.push(format!("a budget of {}", human_duration(b)));
        }
        let this_run = if limits.is_empty() {
            String::new()
        } else {
            format!("; this run: {}", limits.join(" and "))
        };
        let next = s.next_target.as_deref().map_or_else(
            || "every target is done".to_string(),
            |t| format!("next: {t}"),
        );
        self.line(format!(
            "resuming: {} experiments done ({} kept), {} of {} targets done; {next}{this_run}",
            s.experiments_done, s.kept, s.targets_done, s.targets
        ));
    }

    fn on_verdict(&self, experiment: u64, verdict: &KeepVerdict) {
        let text = match verdict {
            KeepVerdict::Keep { speedup } => format!("{speedup:.3}x the best head to head"),
            KeepVerdict::Revert { reason } => reason.clone(),
        };
        if let Ok(mut slot) = self.verdict.lock() {
            *slot = Some((experiment, text));
        }
    }

    fn on_decision(&self, r: &ExperimentRecord, result: Option<&BenchResult>) {
        let rule = self
            .verdict
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .filter(|(n, _)| *n == r.experiment)
            .map(|(_, text)| text);
        self.line(decision_line(r, result, rule.as_deref()));
    }

    fn on_target_end(&self, target: &Target, why: &MoveOn) {
        self.line(format!("── {} done: {why}", target.id));
    }

    fn on_warning(&self, message: &str) {
        tracing::warn!("{message}");
        if !self.quiet {
            self.line(format!("warning: {message}"));
        }
    }
}

fn first_line(s: &str) -> String {
    let l = s.lines().next().unwrap_or("");
    if l.len() > 160 {
        format!(
            "{}…",
            &l[..l.char_indices().nth(160).map_or(l.len(), |(i, _)| i)]
        )
    } else {
        l.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autokernel_core::Comparison;

    fn record(decision: Decision, latency: f64, h2h: Option<Comparison>) -> ExperimentRecord {
        ExperimentRecord {
            description: "tune: BLOCK_M=128".into(),
            commit: None,
            speedup_vs_reference: Some(0.8),
            head_to_head: h2h,
            bench_samples_us: Vec::new(),
            bench_reference_samples_us: Vec::new(),
            ..autokernel_core::testing::pass_row(2, "01-matmul", decision, latency)
        }
    }

    /// The seen contradiction: `[2] keep 01-matmul PASS 54812.57 µs` over a 45065 µs
    /// baseline. The line now shows the head-to-head that kept it, in which the candidate
    /// is the faster one, and not the standalone latency taken in another timing.
    #[test]
    fn a_keep_line_shows_the_figures_that_decided_it() {
        let h = Comparison {
            incumbent_latency_us: 45065.0,
            candidate_latency_us: 40968.2,
            median_speedup: 1.1,
            repetitions: 5,
            spread: 0.021,
            ..Default::default()
        };
        let line = decision_line(
            &record(Decision::Keep, 54812.57, Some(h.clone())),
            None,
            None,
        );
        assert!(line.contains("head to head 45065.0 → 40968.2 µs"), "{line}");
        assert!(line.contains("1.100x the best, spread 2.1%"), "{line}");
        assert!(!line.contains("54812"), "{line}");
        // a revert says the rule's reason beside the figures that gave it
        let slower = Comparison {
            incumbent_latency_us: 9176.0,
            candidate_latency_us: 9250.0,
            median_speedup: 0.992,
            ..h
        };
        let rule =
            "0.8% slower over 5 repetitions (spread 2.1%); it must be over 1.0% faster to be kept";
        let line = decision_line(
            &record(Decision::Revert, 13597.35, Some(slower)),
            None,
            Some(rule),
        );
        assert!(
            line.contains("9176.0 → 9250.0 µs (0.992x the best"),
            "{line}"
        );
        assert!(line.contains(rule), "{line}");
        assert!(!line.contains("13597"), "{line}");
        // the seen noisy case: per-side medians 26677.1 and 31625.6 µs, but the median of
        // the paired ratios 1.011 (spread 46.6%): the line shows the candidate at that
        // ratio, 26677.1 / 1.011 = 26386.8 µs, faster than the best as the keep says
        let noisy = Comparison {
            incumbent_latency_us: 26677.1,
            candidate_latency_us: 31625.6,
            median_speedup: 1.011,
            repetitions: 5,
            spread: 0.466,
            ..Default::default()
        };
        let line = decision_line(&record(Decision::Keep, 30000.0, Some(noisy)), None, None);
        assert!(
            line.contains("26677.1 → 26386.8 µs (1.011x the best"),
            "{line}"
        );
        // without a head-to-head (a baseline) its own timing shows
        let line = decision_line(&record(Decision::Baseline, 45065.0, None), None, None);
        assert!(line.contains(" 45065.0 µs, 0.80x vs PyTorch"), "{line}");
    }

    #[test]
    fn durations_read_as_people_write_them() {
        assert_eq!(human_duration(Duration::from_secs(45)), "45s");
        assert_eq!(human_duration(Duration::from_secs(724)), "12m04s");
        assert_eq!(human_duration(Duration::from_secs(7500)), "2h05m");
    }
}
