//! The [`Orchestrator`]: which target to work on, and when to move on.

use std::time::Duration;

use crate::run::keep::{amdahl_saving, end_to_end_speedup};
use crate::Target;

/// When the orchestrator moves on from a target: [`OrchestratorOptions::default`], then
/// the `with_*` setters (fields may be added, so outside this crate it cannot be written
/// as a struct literal).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OrchestratorOptions {
    /// Consecutive experiments not kept before moving on (default 8).
    pub plateau: u32,
    /// Wall time per target, measured per target (default none).
    pub target_budget: Option<Duration>,
    /// Move on once the best kernel reaches this % of its roofline (default 90).
    pub roofline_goal_pct: f64,
}

impl Default for OrchestratorOptions {
    fn default() -> Self {
        OrchestratorOptions {
            plateau: 8,
            target_budget: None,
            roofline_goal_pct: 90.0,
        }
    }
}

impl OrchestratorOptions {
    /// Sets [`OrchestratorOptions::plateau`].
    pub fn with_plateau(mut self, experiments: u32) -> Self {
        self.plateau = experiments;
        self
    }

    /// Sets [`OrchestratorOptions::target_budget`].
    pub fn with_target_budget(mut self, budget: Duration) -> Self {
        self.target_budget = Some(budget);
        self
    }

    /// Sets [`OrchestratorOptions::roofline_goal_pct`].
    pub fn with_roofline_goal_pct(mut self, pct: f64) -> Self {
        self.roofline_goal_pct = pct;
        self
    }
}

/// Why a target was left.
#[derive(Debug, Clone, PartialEq)]
pub enum MoveOn {
    /// `plateau` consecutive experiments were not kept.
    Plateau(u32),
    /// The per-target time budget ran out.
    TimeBudget,
    /// The best kernel reached the roofline goal (% of peak).
    Roofline(f64),
    /// The agent has nothing more to try.
    Exhausted,
    /// The starter kernel did not pass, so there is nothing correct to improve on.
    BaselineFailed(String),
}

impl std::fmt::Display for MoveOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MoveOn::Plateau(n) => write!(f, "plateau: {n} experiments in a row not kept"),
            MoveOn::TimeBudget => write!(f, "per-target time budget spent"),
            MoveOn::Roofline(p) => write!(f, "reached {p:.1}% of the roofline"),
            MoveOn::Exhausted => write!(f, "the agent has nothing left to try"),
            MoveOn::BaselineFailed(why) => write!(f, "{why}"),
        }
    }
}

/// Bookkeeping of one target.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetState {
    /// The target.
    pub target: Target,
    /// Best speedup over the baseline so far (1.0 at the start).
    pub speedup_vs_baseline: f64,
    /// Best kernel's % of the roofline, when measured.
    pub pct_peak: Option<f64>,
    /// Consecutive experiments not kept.
    pub not_kept_in_a_row: u32,
    /// Time spent on this target.
    pub elapsed: Duration,
    /// Experiments run on this target.
    pub experiments: u32,
    /// Experiments kept.
    pub kept: u32,
    /// Set once the orchestrator moved on.
    pub done: Option<MoveOn>,
}

/// Ranks targets by expected end-to-end gain and decides when to move on.
#[derive(Debug, Clone)]
pub struct Orchestrator {
    options: OrchestratorOptions,
    states: Vec<TargetState>,
}

impl Orchestrator {
    /// Starts with every target untouched.
    pub fn new(targets: Vec<Target>, options: OrchestratorOptions) -> Self {
        let states = targets
            .into_iter()
            .map(|target| TargetState {
                target,
                speedup_vs_baseline: 1.0,
                pct_peak: None,
                not_kept_in_a_row: 0,
                elapsed: Duration::ZERO,
                experiments: 0,
                kept: 0,
                done: None,
            })
            .collect();
        Orchestrator { options, states }
    }

    /// The state of every target, in the order given.
    pub fn states(&self) -> &[TargetState] {
        &self.states
    }

    /// Mutable state of the target with `id`.
    pub fn state_mut(&mut self, id: &str) -> Option<&mut TargetState> {
        self.states.iter_mut().find(|s| s.target.id == id)
    }

    /// Expected end-to-end saving of continuing on a target: `f · (1 − 1/h)` where `h` is
    /// its remaining headroom, goal % over current % of roofline (2× assumed when not yet
    /// measured). The ranking key of [`Orchestrator::next_target`].
    pub fn expected_gain(&self, state: &TargetState) -> f64 {
        let headroom = match state.pct_peak {
            Some(p) if p > 0.0 => (self.options.roofline_goal_pct / p).max(1.0),
            _ => 2.0,
        };
        amdahl_saving(state.target.fraction, headroom)
    }

    /// The target to work on next: the one not yet moved on from with the largest expected
    /// gain; `None` when every target is done. Work stays on a target until it is moved on
    /// from, so ties and changing estimates do not make the loop hop between targets.
    pub fn next_target(&self) -> Option<&Target> {
        self.states
            .iter()
            .filter(|s| s.done.is_none())
            .max_by(|a, b| {
                self.expected_gain(a)
                    .partial_cmp(&self.expected_gain(b))
                    .unwrap_or(std::cmp::Ordering::Equal)
                    // earlier targets win ties
                    .then(std::cmp::Ordering::Greater)
            })
            .map(|s| &s.target)
    }

    /// Records an experiment's outcome on `id` and returns why to move on, if it is time.
    pub fn record(
        &mut self,
        id: &str,
        kept: bool,
        speedup_vs_baseline: Option<f64>,
        pct_peak: Option<f64>,
        took: Duration,
    ) -> Option<MoveOn> {
        let options = self.options.clone();
        let state = self.state_mut(id)?;
        state.experiments += 1;
        state.elapsed += took;
        if kept {
            state.kept += 1;
            state.not_kept_in_a_row = 0;
            if let Some(s) = speedup_vs_baseline {
                state.speedup_vs_baseline = s;
            }
            if pct_peak.is_some() {
                state.pct_peak = pct_peak;
            }
        } else {
            state.not_kept_in_a_row += 1;
        }
        let why = if state
            .pct_peak
            .is_some_and(|p| p >= options.roofline_goal_pct)
        {
            Some(MoveOn::Roofline(state.pct_peak.unwrap_or_default()))
        } else if state.not_kept_in_a_row >= options.plateau {
            Some(MoveOn::Plateau(state.not_kept_in_a_row))
        } else if options.target_budget.is_some_and(|b| state.elapsed >= b) {
            Some(MoveOn::TimeBudget)
        } else {
            None
        };
        if why.is_some() {
            state.done = why.clone();
        }
        why
    }

    /// Marks a target done for a reason found outside [`Orchestrator::record`].
    pub fn finish(&mut self, id: &str, why: MoveOn) {
        if let Some(s) = self.state_mut(id) {
            s.done = Some(why);
        }
    }

    /// Projected end-to-end speedup from every target's best speedup:
    /// `1 / (1 − Σ fᵢ·(1 − 1/sᵢ))` (see [`end_to_end_speedup`]).
    pub fn projected_speedup(&self) -> f64 {
        let parts: Vec<(f64, f64)> = self
            .states
            .iter()
            .map(|s| (s.target.fraction, s.speedup_vs_baseline))
            .collect();
        end_to_end_speedup(&parts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, KernelKind};

    fn target(id: &str, f: f64) -> Target {
        Target::new(id, KernelKind::Softmax)
            .with_dtype(DType::Float16)
            .with_fraction(f)
            .with_op("aten::softmax")
    }

    #[test]
    fn the_largest_share_goes_first_and_ties_keep_order() {
        let o = Orchestrator::new(
            vec![target("a", 0.1), target("b", 0.6), target("c", 0.6)],
            OrchestratorOptions::default(),
        );
        assert_eq!(o.next_target().unwrap().id, "b");
    }

    #[test]
    fn a_plateau_moves_on() {
        let mut o = Orchestrator::new(
            vec![target("a", 0.6), target("b", 0.3)],
            OrchestratorOptions {
                plateau: 3,
                ..Default::default()
            },
        );
        assert_eq!(
            o.record("a", false, None, None, Duration::from_secs(1)),
            None
        );
        assert_eq!(
            o.record("a", false, None, None, Duration::from_secs(1)),
            None
        );
        assert_eq!(
            o.record("a", false, None, None, Duration::from_secs(1)),
            Some(MoveOn::Plateau(3))
        );
        assert_eq!(o.next_target().unwrap().id, "b");
    }

    #[test]
    fn a_kept_experiment_resets_the_plateau_count() {
        let mut o = Orchestrator::new(
            vec![target("a", 0.6)],
            OrchestratorOptions {
                plateau: 2,
                ..Default::default()
            },
        );
        o.record("a", false, None, None, Duration::ZERO);
        o.record("a", true, Some(1.2), Some(50.0), Duration::ZERO);
        assert_eq!(o.record("a", false, None, None, Duration::ZERO), None);
    }

    #[test]
    fn the_time_budget_is_measured_per_target() {
        let mut o = Orchestrator::new(
            vec![target("a", 0.6), target("b", 0.3)],
            OrchestratorOptions {
                target_budget: Some(Duration::from_secs(10)),
                ..Default::default()
            },
        );
        assert_eq!(
            o.record("a", true, Some(1.1), None, Duration::from_secs(6)),
            None
        );
        assert_eq!(
            o.record("b", true, Some(1.1), None, Duration::from_secs(6)),
            None
        );
        assert_eq!(
            o.record("a", true, Some(1.2), None, Duration::from_secs(5)),
            Some(MoveOn::TimeBudget)
        );
    }

    #[test]
    fn reaching_the_roofline_goal_moves_on() {
        let mut o = Orchestrator::new(vec![target("a", 0.6)], OrchestratorOptions::default());
        assert_eq!(
            o.record("a", true, Some(3.0), Some(91.0), Duration::ZERO),
            Some(MoveOn::Roofline(91.0))
        );
        assert!(o.next_target().is_none());
    }

    #[test]
    fn projected_speedup_is_amdahl_over_all_targets() {
        let mut o = Orchestrator::new(
            vec![target("a", 0.6), target("b", 0.05)],
            OrchestratorOptions::default(),
        );
        o.record("a", true, Some(1.5), None, Duration::ZERO);
        // only a improved: 1 / (1 - 0.2) = 1.25
        assert!((o.projected_speedup() - 1.25).abs() < 1e-12);
        o.record("b", true, Some(1.5), None, Duration::ZERO);
        assert!((o.projected_speedup() - 1.0 / (1.0 - 0.2 - 0.05 / 3.0)).abs() < 1e-12);
    }
}
