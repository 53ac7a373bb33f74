//! A warm worker answers without re-importing torch.

use std::time::Instant;

use autokernel_bench::{PyWorkerBenchmarker, Worker};

use super::*;

#[tokio::test]
async fn a_second_request_on_a_warm_worker_does_not_reimport_torch() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let t = Instant::now();
    let first = b.worker().status(Duration::from_secs(120)).await.unwrap();
    let cold = t.elapsed();
    let r = bench(&b, &good_softmax(), true, 120).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    let t = Instant::now();
    let second = b.worker().status(Duration::from_secs(120)).await.unwrap();
    let warm = t.elapsed();
    assert_eq!(first.pid, second.pid, "same process");
    assert!(
        second.imported_s_ago > first.imported_s_ago,
        "{first:?} {second:?}"
    );
    // importing torch + triton takes seconds; a warm status is a JSON round trip
    assert!(warm * 20 < cold, "warm {warm:?} vs cold {cold:?}");
    assert!(warm < Duration::from_millis(500), "warm {warm:?}");
}

/// A bench request that leaves the device open (`Device::Auto`, a `BenchRequest`'s default)
/// runs on the worker's configured device: the worker shared with `status` and scripts is
/// not restarted for it.
#[tokio::test]
async fn a_request_for_any_device_runs_on_the_workers_device_without_a_restart() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let before = b.worker().status(Duration::from_secs(120)).await.unwrap();
    let mut r = BenchRequest::new(good_softmax());
    assert_eq!(r.device, Device::Auto, "the default this test is about");
    r.quick = true;
    let result = b.bench(&r).await.expect("the harness runs");
    assert!(result.correctness.is_pass(), "{:?}", result.correctness);
    assert_eq!(result.device, "cpu");
    let after = b.worker().status(Duration::from_secs(120)).await.unwrap();
    assert_eq!(before.pid, after.pid, "the same worker served both");
}

/// Candidates' workers start ahead of need, as many as asked: after a candidate is judged,
/// that many fresh processes are starting (or ready) for the next ones, each alive, none the
/// judged candidate's own.
#[tokio::test]
async fn as_many_spare_workers_start_as_asked() {
    let b = PyWorkerBenchmarker::with_worker(std::sync::Arc::new(
        Worker::new(options()).with_spare_workers(3),
    ));
    let r = bench(&b, &good_softmax(), true, 120).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    let spares = b.worker().spare_pids().await;
    assert_eq!(spares.len(), 3, "{spares:?}");
    for pid in &spares {
        assert!(
            Path::new(&format!("/proc/{pid}")).exists(),
            "spare {pid} is gone"
        );
    }
    // the next candidate takes the oldest spare, and one more starts in its place
    let r = bench(&b, &good_softmax(), true, 120).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    let after = b.worker().spare_pids().await;
    assert_eq!(after.len(), 3, "{after:?}");
    assert!(!after.contains(&spares[0]), "{spares:?} then {after:?}");
    assert_eq!(&after[..2], &spares[1..], "{spares:?} then {after:?}");
}
