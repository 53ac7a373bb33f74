//! The keep rule and Amdahl's law.

use crate::{BenchResult, Comparison};

/// Default threshold of the keep rule: a candidate must be more than 1% faster.
pub const DEFAULT_KEEP_THRESHOLD: f64 = 0.01;

/// Largest spread of the head-to-head speedups, `(max − min) / median`, at which the keep
/// rule decides on representative (GPU) timings. On the H200 (2026-11-30), 94 comparisons
/// of two runs had spreads of 0.2–6% (median 1.0%); before the timing fix of that day a
/// busy host produced 491%, and slower candidates were kept.
pub const MAX_SPREAD: f64 = 0.25;

/// Head-to-heads run again, at most, when one is too noisy to decide ([`MAX_SPREAD`])
/// before the keep rule reverts on the noise: a passing interference (a compile on the
/// host, another user's kernel) rarely lasts through two more.
pub const NOISY_RETRIES: u32 = 2;

/// Why a candidate was or was not kept.
#[derive(Debug, Clone, PartialEq)]
pub enum KeepVerdict {
    /// Correct and faster beyond the threshold.
    Keep {
        /// The measured median speedup over the incumbent.
        speedup: f64,
    },
    /// Not kept, with the reason for the log.
    Revert {
        /// e.g. `0.6% faster over 5 repetitions (spread 1.2%), below the 1.0% threshold`,
        /// or `85.5% slower over 5 repetitions …` for a candidate slower than the best.
        reason: String,
    },
}

/// The keep rule: keep only a `PASS` candidate whose median speedup over the incumbent,
/// measured head to head in one process ([`Comparison`]), exceeds `1 + threshold`.
pub fn decide(
    candidate: &BenchResult,
    comparison: Option<&Comparison>,
    threshold: f64,
) -> KeepVerdict {
    if !candidate.correctness.is_pass() {
        return KeepVerdict::Revert {
            reason: format!("verdict {}", candidate.correctness.label()),
        };
    }
    let Some(c) = comparison else {
        return KeepVerdict::Revert {
            reason: "no head-to-head timing".to_string(),
        };
    };
    if !c.median_speedup.is_finite() {
        return KeepVerdict::Revert {
            reason: "timing not finite".to_string(),
        };
    }
    let change = speed_change(c.median_speedup);
    if candidate.timing_representative && c.spread > MAX_SPREAD {
        return KeepVerdict::Revert {
            reason: format!(
                "too noisy to decide: {change} but a spread of {:.0}% over {} repetitions (limit {:.0}%); is something else using the GPU or the host?",
                c.spread * 100.0,
                c.repetitions,
                MAX_SPREAD * 100.0
            ),
        };
    }
    if c.median_speedup > 1.0 + threshold {
        KeepVerdict::Keep {
            speedup: c.median_speedup,
        }
    } else {
        // "slower, below the threshold" reads as if a slower kernel nearly made it
        let why = if c.median_speedup < 1.0 {
            format!(
                "; it must be over {:.1}% faster to be kept",
                threshold * 100.0
            )
        } else {
            format!(", below the {:.1}% threshold", threshold * 100.0)
        };
        KeepVerdict::Revert {
            reason: format!(
                "{change} over {} repetitions (spread {:.1}%){why}",
                c.repetitions,
                c.spread * 100.0,
            ),
        }
    }
}

/// A median speedup over the incumbent as words: `20.0% faster` above 1, `85.5% slower`
/// below it (a speedup of 0.145: the candidate runs at 14.5% of the best's speed), never
/// a negative "faster". The percentage is `|s − 1| · 100`, one decimal.
fn speed_change(speedup: f64) -> String {
    let pct = (speedup - 1.0) * 100.0;
    if pct < 0.0 {
        format!("{:.1}% slower", -pct)
    } else {
        format!("{pct:.1}% faster")
    }
}

/// Fraction of end-to-end time saved by speeding up a part that takes fraction `f` of it
/// by `s`: `f · (1 − 1/s)`.
///
/// # Source
/// Amdahl, "Validity of the single processor approach…", AFIPS 1967.
pub fn amdahl_saving(f: f64, s: f64) -> f64 {
    if s <= 0.0 {
        return 0.0;
    }
    f * (1.0 - 1.0 / s)
}

/// End-to-end speedup when each part `(fᵢ, sᵢ)` is sped up: `1 / (1 − Σ fᵢ·(1 − 1/sᵢ))`.
///
/// # Source
/// Amdahl's law, as [`amdahl_saving`].
pub fn end_to_end_speedup(parts: &[(f64, f64)]) -> f64 {
    let saved: f64 = parts.iter().map(|&(f, s)| amdahl_saving(f, s)).sum();
    1.0 / (1.0 - saved)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Correctness, KernelKind, Stage};

    fn result(c: Correctness) -> BenchResult {
        BenchResult {
            kind: Some(KernelKind::Softmax),
            correctness: c,
            stages: vec![],
            metrics: None,
            device: "cpu".into(),
            timing_representative: false,
            source_sha256: String::new(),
        }
    }

    fn cmp(s: f64) -> Comparison {
        Comparison {
            incumbent_latency_us: 10.0 * s,
            candidate_latency_us: 10.0,
            median_speedup: s,
            repetitions: 5,
            spread: 0.02,
            ..Default::default()
        }
    }

    #[test]
    fn amdahl_matches_hand_worked_values() {
        // f = 0.6 at s = 1.5: saves 0.2 → 1/0.8 = 1.25
        assert!((end_to_end_speedup(&[(0.6, 1.5)]) - 1.25).abs() < 1e-12);
        // f = 0.05 at s = 1.5: saves 1/60 → 60/59 = 1.01695
        assert!((end_to_end_speedup(&[(0.05, 1.5)]) - 60.0 / 59.0).abs() < 1e-12);
        // two parts: 0.5 at 2x saves 0.25, 0.2 at 4x saves 0.15 → 1/0.6
        assert!((end_to_end_speedup(&[(0.5, 2.0), (0.2, 4.0)]) - 1.0 / 0.6).abs() < 1e-12);
    }

    #[test]
    fn a_faster_passing_candidate_is_kept() {
        assert_eq!(
            decide(&result(Correctness::Pass), Some(&cmp(1.2)), 0.01),
            KeepVerdict::Keep { speedup: 1.2 }
        );
    }

    #[test]
    fn on_a_gpu_a_comparison_too_noisy_to_trust_is_not_kept_however_fast() {
        let mut gpu = result(Correctness::Pass);
        gpu.timing_representative = true;
        let mut noisy = cmp(2.0);
        noisy.spread = 0.30;
        match decide(&gpu, Some(&noisy), 0.01) {
            KeepVerdict::Revert { reason } => {
                assert!(reason.contains("too noisy"), "{reason}");
                assert!(reason.contains("spread of 30%"), "{reason}");
            }
            v => panic!("{v:?}"),
        }
        // the same spread on the CPU interpreter decides as before (its timings say nothing)
        assert!(matches!(
            decide(&result(Correctness::Pass), Some(&noisy), 0.01),
            KeepVerdict::Keep { .. }
        ));
        // and a quiet GPU comparison is kept
        assert!(matches!(
            decide(&gpu, Some(&cmp(2.0)), 0.01),
            KeepVerdict::Keep { .. }
        ));
    }

    #[test]
    fn a_noisy_candidate_within_the_threshold_is_not_kept() {
        let v = decide(&result(Correctness::Pass), Some(&cmp(1.006)), 0.01);
        match v {
            KeepVerdict::Revert { reason } => {
                assert!(reason.contains("below the 1.0% threshold"), "{reason}")
            }
            other => panic!("kept a 0.6% gain: {other:?}"),
        }
    }

    #[test]
    fn a_slower_candidate_is_said_to_be_slower_never_negatively_faster() {
        match decide(&result(Correctness::Pass), Some(&cmp(0.145)), 0.01) {
            KeepVerdict::Revert { reason } => {
                assert!(
                    reason.starts_with("85.5% slower over 5 repetitions"),
                    "{reason}"
                );
                assert!(!reason.contains("-"), "{reason}");
                assert!(
                    reason.ends_with("; it must be over 1.0% faster to be kept")
                        && !reason.contains("below the"),
                    "{reason}"
                );
            }
            other => panic!("kept a slower candidate: {other:?}"),
        }
        let mut gpu = result(Correctness::Pass);
        gpu.timing_representative = true;
        let mut noisy = cmp(0.9);
        noisy.spread = 0.30;
        match decide(&gpu, Some(&noisy), 0.01) {
            KeepVerdict::Revert { reason } => {
                assert!(
                    reason.starts_with("too noisy to decide: 10.0% slower but"),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(speed_change(1.2), "20.0% faster");
        assert_eq!(speed_change(1.0), "0.0% faster");
    }

    #[test]
    fn a_failing_candidate_is_never_kept_however_fast() {
        let fail = Correctness::Fail {
            stage: Stage::Stability,
            reason: "nan".into(),
        };
        assert!(matches!(
            decide(&result(fail), Some(&cmp(10.0)), 0.01),
            KeepVerdict::Revert { .. }
        ));
        assert!(matches!(
            decide(
                &result(Correctness::Crash {
                    reason: "segv".into()
                }),
                Some(&cmp(10.0)),
                0.01
            ),
            KeepVerdict::Revert { .. }
        ));
    }
}
