//! The device's own record of the timed calls (issue 21, point 3, `worker/cupti.rs`): a
//! candidate whose timed calls compute on the host, replay torch's kernels from a CUDA
//! graph, or compute with torch under a forged autotuner scope and a bumped launch count
//! is TAMPER, naming what the device ran (`tests/cases/device/`, see its README). CUPTI
//! exists only with a GPU: these run when `AUTOKERNEL_TEST_DEVICE=cuda` and say they are
//! skipped otherwise (on the CPU each of these files PASSes: docs/bench.md, "Threat
//! model"). On the H200 their verdicts are in docs/benchmarks.md.

use std::time::Duration;

use autokernel_bench::{PyWorkerBenchmarker, Worker, WorkerOptions};
use autokernel_core::{BenchRequest, Benchmarker, Correctness, Device, Stage};

use super::*;

/// (file, what the TAMPER reason must say)
const CASES: &[(&str, &str)] = &[
    ("computes_on_the_host.py", "the timed calls copied"),
    (
        "replays_torchs_softmax_in_a_graph.py",
        "cunn_SoftMaxForward",
    ),
    (
        "forges_the_autotuners_scope.py",
        "the timed calls launched no Triton kernel defined in forges_the_autotuners_scope.py",
    ),
];

#[tokio::test]
#[allow(clippy::print_stderr)] // says why it did not run, on a machine without a GPU
async fn what_the_device_ran_in_the_timed_calls_is_judged() {
    if std::env::var("AUTOKERNEL_TEST_DEVICE").as_deref() != Ok("cuda") {
        eprintln!("skipped: set AUTOKERNEL_TEST_DEVICE=cuda on a machine with a GPU");
        return;
    }
    let b = PyWorkerBenchmarker::with_worker(std::sync::Arc::new(Worker::new(WorkerOptions {
        device: Device::Cuda,
        ..options()
    })));
    let judge = |path: std::path::PathBuf| {
        let mut r = BenchRequest::new(path);
        r.device = Device::Cuda;
        r.quick = true;
        r.timeout = Duration::from_secs(300);
        r
    };
    let mut wrong = Vec::new();
    for (name, fragment) in CASES {
        let r = b
            .bench(&judge(cases_dir("device").join(name)))
            .await
            .expect("the harness runs");
        match &r.correctness {
            Correctness::Tamper { reason }
                if reason.contains(fragment) && r.failed_stage() == Some(Stage::Timing) => {}
            other => wrong.push(format!("{name}: {other:?}")),
        }
        let honest = b
            .bench(&judge(good_softmax()))
            .await
            .expect("the harness runs");
        if !honest.correctness.is_pass() {
            wrong.push(format!(
                "the starter after {name}: {:?}",
                honest.correctness
            ));
        }
    }
    // torch glue that only moves data (a scalar read back, cat, casts, fills, flips)
    let glue = b
        .bench(&judge(
            cases_dir("device").join("glues_with_allowed_ops.py"),
        ))
        .await
        .expect("the harness runs");
    if !glue.correctness.is_pass() {
        wrong.push(format!("glues_with_allowed_ops.py: {:?}", glue.correctness));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
