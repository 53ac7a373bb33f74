//! An allowlist, not a denylist (issue 21, point 3): a candidate whose result does not come
//! from Triton kernels of its own file (a composite of ops that are not the reference's
//! own, a token launch beside torch ops, a kernel only while the profiler or no timer is
//! watching, torch ops beside a token launch in timed calls) is TAMPER, naming what it did (`tests/cases/ops/`, see its README). Before,
//! each of these PASSed. On the CPU.

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::{Correctness, Stage};

use super::*;

/// (file, the stage it fails at, what the reason must say)
const CASES: &[(&str, Stage, &str)] = &[
    (
        "composes_logsumexp.py",
        Stage::Smoke,
        "kernel_fn dispatched aten::exp, aten::logsumexp, aten::sub, not among",
    ),
    ("launches_a_token_kernel.py", Stage::Smoke, "aten::nansum"),
    (
        "honest_only_under_the_profiler.py",
        Stage::Determinism,
        "kernel_fn launched no Triton kernel defined in honest_only_under_the_profiler.py in 2 call(s)",
    ),
    (
        "composes_at_odd_widths.py",
        Stage::Edge,
        "kernel_fn dispatched aten::amax, aten::div, aten::exp, aten::nansum, aten::sub, not among",
    ),
    (
        "composes_when_timed.py",
        Stage::Timing,
        "the timed calls launched no Triton kernel defined in composes_when_timed.py in",
    ),
    (
        "composes_beside_a_token_kernel_when_timed.py",
        Stage::Timing,
        "the timed calls dispatched aten::amax, aten::div, aten::exp, aten::sub, aten::sum, not among",
    ),
    (
        "hides_ops_in_the_autotuners_scope.py",
        Stage::Smoke,
        "kernel_fn dispatched aten::amax, aten::div, aten::exp, aten::sub, aten::sum, not among",
    ),
    (
        "hides_ops_from_the_profiler.py",
        Stage::Load,
        "torch.profiler.profile",
    ),
    (
        "restarts_the_profilers_session.py",
        Stage::Smoke,
        "kernel_fn stopped the profiler's session and started another, losing the ops before",
    ),
    (
        "finds_the_switch_through_the_gc.py",
        Stage::Smoke,
        "kernel_fn dispatched aten::_softmax, aten::softmax, the reference's own operation",
    ),
];

#[tokio::test]
async fn a_result_not_computed_by_the_candidates_own_kernels_is_tamper() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let mut wrong = Vec::new();
    for (name, stage, fragment) in CASES {
        let r = bench(&b, &cases_dir("ops").join(name), true, 300).await;
        let failed_at = r.failed_stage();
        match &r.correctness {
            Correctness::Tamper { reason }
                if reason.contains(fragment) && failed_at == Some(*stage) => {}
            other => wrong.push(format!("{name}: {other:?} (failed at {failed_at:?})")),
        }
        the_starter_passes_after(&b, name, 300, &mut wrong).await;
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

/// A kernel right under the profiler and wrong (zeros, no launch) in the determinism
/// repeats, which the op check does not watch: FAIL for the wrong output, not TAMPER for the
/// missing launch (a wrong result is FAIL whoever computed it).
#[tokio::test]
async fn a_wrong_result_in_an_unprofiled_repeat_is_fail() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let name = "wrong_in_its_unprofiled_repeats.py";
    let r = bench(&b, &cases_dir("ops").join(name), true, 300).await;
    assert!(
        matches!(
            r.correctness,
            Correctness::Fail {
                stage: Stage::Determinism,
                ..
            }
        ),
        "{:?}",
        r.correctness
    );
}

/// Glue that moves or describes data (padding, transposes, a scalar built with
/// `torch.tensor`) around a kernel of the candidate's own passes: the allowlist is not a
/// ban on torch.
#[tokio::test]
async fn an_honest_kernel_with_padding_and_transposes_around_it_passes() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let name = "pads_and_transposes_around_its_kernel.py";
    let r = bench(&b, &cases_dir("ops").join(name), true, 300).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
}

/// Torch's profiler switch that hid `torch.softmax` from the op check for a moment
/// (`_toggle_collection_dynamic`, which PASSed before) is gone from the candidate's process:
/// calling it raises, so the candidate's call fails, and the starter judged next passes.
#[tokio::test]
async fn the_profilers_collection_switch_is_gone() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let name = "toggles_the_profilers_collection.py";
    let r = bench(&b, &cases_dir("ops").join(name), true, 300).await;
    let failed_at = r.failed_stage();
    match &r.correctness {
        Correctness::Fail { reason, .. }
            if reason.contains("profiler switches are not available to a kernel")
                && failed_at == Some(Stage::Smoke) => {}
        other => panic!("{other:?} (failed at {failed_at:?})"),
    }
    let mut wrong = Vec::new();
    the_starter_passes_after(&b, name, 300, &mut wrong).await;
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
