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
    /// The target spent its share of the loop's budget ([`Orchestrator::share_budget`])
    /// with its best kernel still slower than PyTorch (`vs_pytorch` below 1, or never
    /// measured), and another target is open: its time goes to the others.
    NoParity {
        /// The best kernel's speedup over PyTorch, when measured.
        vs_pytorch: Option<f64>,
        /// The share it was given.
        share: Duration,
    },
}

impl std::fmt::Display for MoveOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MoveOn::Plateau(n) => write!(f, "plateau: {n} experiments in a row not kept"),
            MoveOn::TimeBudget => write!(f, "per-target time budget spent"),
            MoveOn::Roofline(p) => write!(f, "reached {p:.1}% of the roofline"),
            MoveOn::Exhausted => write!(f, "the agent has nothing left to try"),
            MoveOn::BaselineFailed(why) => write!(f, "{why}"),
            MoveOn::NoParity { vs_pytorch, share } => {
                let vs =
                    vs_pytorch.map_or_else(|| "not measured".to_string(), |v| format!("{v:.2}x"));
                if share.is_zero() {
                    write!(f, "no parity with PyTorch ({vs}), where the plan expected no saving: its time goes to the other targets")
                } else {
                    write!(
                        f,
                        "no parity with PyTorch ({vs}) after its {:.0} s share of the budget: its time goes to the other targets",
                        share.as_secs_f64()
                    )
                }
            }
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
    /// The best kernel's speedup over PyTorch at the target (PyTorch's latency over its
    /// own, measured side by side), once measured.
    pub vs_pytorch: Option<f64>,
    /// Its share of the loop's budget, once [`Orchestrator::share_budget`] gave one.
    pub share: Option<Duration>,
    /// [`TargetState::elapsed`] when the share was given (a resumed run's earlier time
    /// does not count against this run's share).
    pub elapsed_before_share: Duration,
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
                vs_pytorch: None,
                share: None,
                elapsed_before_share: Duration::ZERO,
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

    /// Expected end-to-end saving of continuing on a target, as a share of the model's
    /// time. Once its best kernel is measured against PyTorch (`vs_pytorch`, and `pct_peak`
    /// of the roofline), in units of that kernel's time: the op now takes `min(1, vs)` in the
    /// model (PyTorch's op stays where it is faster), the best reachable is `pct / goal`
    /// (or PyTorch's own `vs` where the plan's [`crate::Headroom`] expects no better: a
    /// tuned library kernel, an op at the roofline already), and the saving is `f · (now − reachable) / vs`. Before that, the
    /// plan's [`Target::expected_saving`]; without one, `f · (1 − 1/h)` with `h` the goal
    /// over the current % of the roofline (2× when not measured). The ranking key of
    /// [`Orchestrator::next_target`] and the weight of [`Orchestrator::share_budget`].
    pub fn expected_gain(&self, state: &TargetState) -> f64 {
        let f = state.target.fraction;
        let goal = self.options.roofline_goal_pct;
        let library = state
            .target
            .headroom
            .is_some_and(|h| h.reachable_us >= h.pytorch_us);
        match (state.vs_pytorch, state.pct_peak) {
            (Some(vs), Some(pct)) if vs > 0.0 && pct > 0.0 && state.target.headroom.is_some() => {
                let now = vs.min(1.0);
                let reachable = if library { vs } else { pct / goal };
                f * ((now - reachable) / vs).max(0.0)
            }
            _ if state.pct_peak.is_none() && state.target.headroom.is_some() => {
                state.target.expected_saving().unwrap_or_default()
            }
            _ => {
                let headroom = match state.pct_peak {
                    Some(p) if p > 0.0 => (goal / p).max(1.0),
                    _ => 2.0,
                };
                amdahl_saving(f, headroom)
            }
        }
    }

    /// Splits `budget`, the loop's time, among the targets not moved on from, in proportion
    /// to their [`Orchestrator::expected_gain`] (evenly when none expects a gain). A target
    /// that spends its share while still slower than PyTorch moves on
    /// ([`MoveOn::NoParity`]) when another is open; one at parity or faster keeps going until
    /// its plateau, as without a budget. Only targets planned from a profile on a known GPU
    /// (with a [`crate::Headroom`]) take a share: on the CPU, Triton's interpreter is never
    /// at parity, and the loop stays on a target until its plateau as before.
    pub fn share_budget(&mut self, budget: Duration) {
        let open: Vec<usize> = (0..self.states.len())
            .filter(|&i| self.states[i].done.is_none())
            .collect();
        let gains: Vec<f64> = open
            .iter()
            .map(|&i| self.expected_gain(&self.states[i]))
            .collect();
        let total: f64 = gains.iter().sum();
        for (&i, gain) in open.iter().zip(&gains) {
            let weight = if total > 0.0 {
                gain / total
            } else {
                1.0 / open.len() as f64
            };
            let state = &mut self.states[i];
            if state.target.headroom.is_none() {
                continue; // no profile on a known GPU: no parity to expect, as before
            }
            state.share = Some(budget.mul_f64(weight));
            state.elapsed_before_share = state.elapsed;
        }
    }

    /// Records what the target's best kernel measured against PyTorch (the baseline's bench
    /// or a kept experiment's): its speedup over PyTorch and its % of the roofline.
    pub fn measured(&mut self, id: &str, vs_pytorch: Option<f64>, pct_peak: Option<f64>) {
        if let Some(s) = self.state_mut(id) {
            if vs_pytorch.is_some() {
                s.vs_pytorch = vs_pytorch;
            }
            if pct_peak.is_some() {
                s.pct_peak = pct_peak;
            }
        }
    }

    /// Counts time spent on a target outside its experiments (its baseline's bench).
    pub fn spend(&mut self, id: &str, took: Duration) {
        if let Some(s) = self.state_mut(id) {
            s.elapsed += took;
        }
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
        let others_open = self
            .states
            .iter()
            .any(|s| s.target.id != id && s.done.is_none());
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
        } else if let Some(share) = state.share.filter(|share| {
            others_open
                && state.elapsed.saturating_sub(state.elapsed_before_share) >= *share
                && state.vs_pytorch.is_none_or(|v| v < 1.0)
        }) {
            Some(MoveOn::NoParity {
                vs_pytorch: state.vs_pytorch,
                share,
            })
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

    fn planned(id: &str, f: f64, pytorch_us: f64, reachable_us: f64) -> Target {
        target(id, f).with_headroom(crate::Headroom {
            pytorch_us,
            reachable_us,
        })
    }

    #[test]
    fn the_plan_s_expected_saving_ranks_a_library_kernel_last() {
        // a matmul at cuBLAS's own time: nothing to win, whatever its share
        let o = Orchestrator::new(
            vec![
                planned("mm", 0.6, 10.0, 10.0),
                planned("norm", 0.05, 8.0, 2.0),
            ],
            OrchestratorOptions::default(),
        );
        assert_eq!(o.expected_gain(&o.states()[0]), 0.0);
        // 0.05 · (1 − 2/8)
        assert!((o.expected_gain(&o.states()[1]) - 0.0375).abs() < 1e-12);
        assert_eq!(o.next_target().unwrap().id, "norm");
    }

    #[test]
    fn a_measured_kernel_gains_only_what_is_left_below_pytorch() {
        let mut o = Orchestrator::new(
            vec![planned("a", 0.4, 10.0, 2.0)],
            OrchestratorOptions::default(),
        );
        // ours 2x slower than PyTorch, at 30% of the roofline, goal 90%: in units of ours
        // the op takes 0.5 now (PyTorch's), 1/3 at best: 0.4 · (0.5 − 1/3) / 0.5
        o.measured("a", Some(0.5), Some(30.0));
        assert!((o.expected_gain(&o.states()[0]) - 0.4 * (0.5 - 1.0 / 3.0) / 0.5).abs() < 1e-12);
        // 1.5x faster than PyTorch at 60%: 0.4 · (1 − 2/3) / 1.5
        o.measured("a", Some(1.5), Some(60.0));
        assert!((o.expected_gain(&o.states()[0]) - 0.4 * (1.0 / 3.0) / 1.5).abs() < 1e-12);
    }

    #[test]
    fn a_target_short_of_parity_hands_its_share_of_the_budget_on() {
        // savings 0.5 · (1 − 5/10) = 0.25 and 0.25 · (1 − 2.5/10) = 0.1875: shares of 70 s
        // in proportion, 40 s and 30 s
        let mut o = Orchestrator::new(
            vec![planned("a", 0.5, 10.0, 5.0), planned("b", 0.25, 10.0, 2.5)],
            OrchestratorOptions::default(),
        );
        o.share_budget(Duration::from_secs(70));
        let share = o.states()[0].share.unwrap().as_secs_f64();
        assert!((share - 40.0).abs() < 1e-6, "{share}");
        assert!((o.states()[1].share.unwrap().as_secs_f64() - 30.0).abs() < 1e-6);
        assert_eq!(o.next_target().unwrap().id, "a");
        o.spend("a", Duration::from_secs(10)); // the baseline
        o.measured("a", Some(0.8), Some(20.0));
        assert_eq!(
            o.record("a", false, None, None, Duration::from_secs(25)),
            None
        );
        match o.record("a", false, None, None, Duration::from_secs(5)) {
            Some(MoveOn::NoParity { vs_pytorch, share }) => {
                assert_eq!(vs_pytorch, Some(0.8));
                assert!((share.as_secs_f64() - 40.0).abs() < 1e-6);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(o.next_target().unwrap().id, "b");
        // the last open target keeps going past its share, at parity or not
        o.measured("b", Some(0.9), Some(20.0));
        assert_eq!(
            o.record("b", false, None, None, Duration::from_secs(60)),
            None
        );
    }

    #[test]
    fn a_target_at_parity_keeps_going_past_its_share() {
        let mut o = Orchestrator::new(
            vec![planned("a", 0.5, 10.0, 5.0), planned("b", 0.25, 10.0, 2.5)],
            OrchestratorOptions::default(),
        );
        o.share_budget(Duration::from_secs(70));
        o.measured("a", Some(1.3), Some(40.0));
        assert_eq!(
            o.record("a", true, Some(1.3), Some(40.0), Duration::from_secs(50)),
            None
        );
        // a target without a plan's headroom (a CPU profile) takes no share at all
        let mut cpu = Orchestrator::new(
            vec![target("a", 0.5), target("b", 0.2)],
            OrchestratorOptions::default(),
        );
        cpu.share_budget(Duration::from_secs(70));
        assert!(cpu.states().iter().all(|s| s.share.is_none()));
        assert_eq!(
            cpu.record("a", false, None, None, Duration::from_secs(500)),
            None
        );
    }
}
