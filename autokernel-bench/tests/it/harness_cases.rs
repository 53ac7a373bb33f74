//! The kernel files in ../shared/cases/harness/ (see its README): none may PASS.

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::Correctness;

use super::*;

/// zeros_output.py: an all-zeros softmax. Fails (elementwise at CPU widths; the relative L2
/// bound of 1.0 is covered by the judge's unit test at the case's 4 x 393216).
#[tokio::test]
async fn zeros_output_fails() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(
        &b,
        &cases_dir("harness").join("zeros_output.py"),
        false,
        300,
    )
    .await;
    let Correctness::Fail { reason, .. } = &r.correctness else {
        panic!("{:?}", r.correctness)
    };
    assert!(reason.contains("all zeros"), "{reason}");
}

/// uninitialized_output.py: torch.empty_like; the reference's output stays alive, so the
/// allocation cannot recycle it.
#[tokio::test]
async fn uninitialized_output_fails() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(
        &b,
        &cases_dir("harness").join("uninitialized_output.py"),
        false,
        300,
    )
    .await;
    assert!(
        matches!(r.correctness, Correctness::Fail { .. }),
        "{:?}",
        r.correctness
    );
}

/// mutates_inputs.py: zeroes A and B. TAMPER, the reason naming the modified input.
#[tokio::test]
async fn mutates_inputs_is_rejected_naming_the_input() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(
        &b,
        &cases_dir("harness").join("mutates_inputs.py"),
        false,
        300,
    )
    .await;
    assert!(!r.correctness.is_pass());
    let reason = r.correctness.reason().unwrap_or_default();
    assert!(reason.contains("modified its input `A`"), "{reason}");
}

/// side_stream.py is GPU-only: on the CPU it cannot create a CUDA stream, and it computes
/// with `aten::mm`; it must not pass.
#[tokio::test]
async fn side_stream_does_not_pass_on_the_cpu() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(&b, &cases_dir("harness").join("side_stream.py"), true, 300).await;
    assert!(!r.correctness.is_pass(), "{:?}", r.correctness);
}
