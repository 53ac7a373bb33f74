//! Progress on stderr: an indicatif spinner for the experiment in flight and one line per
//! decision. Hidden under `--quiet`, `--no-progress`, or when stderr is not a terminal; the
//! decision lines still go to the log.

use std::io::IsTerminal;
use std::time::Duration;

use autokernel_core::keep::KeepVerdict;
use autokernel_core::{
    BenchResult, Decision, ExperimentRecord, MoveOn, Reporter, Target, TargetState,
};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::cli::GlobalArgs;

/// Draws the loop's progress.
pub struct ProgressReporter {
    bar: ProgressBar,
    quiet: bool,
    /// The keep rule's word on the experiment being decided, shown on its line.
    verdict: std::sync::Mutex<Option<(u64, String)>>,
    /// Whether the targets are a model's, with a share of its time to show (not `tune`'s).
    model_shares: bool,
}

/// Whether bars may be drawn.
pub fn bars_enabled(global: &GlobalArgs) -> bool {
    !global.quiet && !global.no_progress && global.verbose == 0 && std::io::stderr().is_terminal()
}

/// A spinner with `message`, hidden when bars are disabled.
pub fn spinner(global: &GlobalArgs, message: &str) -> ProgressBar {
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
    bar.set_message(message.to_string());
    bar
}

impl ProgressReporter {
    /// A reporter following the global flags, for a model's targets.
    pub fn new(global: &GlobalArgs) -> Self {
        ProgressReporter {
            bar: spinner(global, "starting"),
            quiet: global.quiet,
            verdict: std::sync::Mutex::new(None),
            model_shares: true,
        }
    }

    /// The same for targets that are no model's (`tune`): no share of model time to show.
    pub fn without_model(mut self) -> Self {
        self.model_shares = false;
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

    /// Removes the spinner.
    pub fn finish(&self) {
        self.bar.finish_and_clear();
    }
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

    fn on_experiment_start(&self, target: &Target, experiment: u64) {
        self.bar.set_message(format!(
            "experiment {experiment} on {}: proposing",
            target.id
        ));
    }

    fn on_candidate(&self, target: &Target, experiment: u64, description: &str) {
        self.bar.set_message(format!(
            "experiment {experiment} on {}: benchmarking `{description}`",
            target.id
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
        let timing = match (r.latency_us, r.speedup_vs_reference) {
            (Some(l), Some(s)) => format!(" {l:.2} µs, {s:.2}x vs PyTorch"),
            (Some(l), None) => format!(" {l:.2} µs"),
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
        let rule = self
            .verdict
            .lock()
            .ok()
            .and_then(|mut slot| slot.take())
            .filter(|(n, _)| *n == r.experiment && why.is_empty())
            .map(|(_, text)| format!(" ({text})"))
            .unwrap_or_default();
        let mark = match r.decision {
            Decision::Keep => "keep    ",
            Decision::Revert => "revert  ",
            Decision::Baseline => "baseline",
            Decision::Invalid => "invalid ",
        };
        self.line(format!(
            "[{:>3}] {mark} {} {}{timing}{why}{rule} · {}",
            r.experiment, r.target, r.correctness, r.description
        ));
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
