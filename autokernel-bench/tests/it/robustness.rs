//! A candidate that hangs, exits, segfaults, raises, does not parse or allocates without
//! bound gets its verdict, and the next request succeeds on a fresh worker.

use std::sync::Arc;

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::{Correctness, Stage};

use super::*;

const HEADER: &str = "import torch\nKERNEL_KIND = \"softmax\"\nCONFIG = {}\nTUNABLES = {}\n";

async fn then_good(b: &PyWorkerBenchmarker) {
    let r = bench(b, &good_softmax(), true, 120).await;
    assert!(
        r.correctness.is_pass(),
        "the next request must pass: {:?}",
        r.correctness
    );
}

async fn pid(b: &PyWorkerBenchmarker) -> u32 {
    b.worker()
        .status(Duration::from_secs(120))
        .await
        .expect("status")
        .pid
}

#[tokio::test]
async fn a_hanging_kernel_times_out_and_the_next_request_gets_a_fresh_worker() {
    let dir = tempfile::tempdir().unwrap();
    let k = write(
        dir.path(),
        "kernel.py",
        &format!("{HEADER}def kernel_fn(x):\n    while True:\n        pass\n"),
    );
    let b = PyWorkerBenchmarker::with_worker(worker());
    let before = pid(&b).await;
    let r = bench(&b, &k, true, 6).await;
    let Correctness::Timeout { reason } = &r.correctness else {
        panic!("{:?}", r.correctness)
    };
    assert!(reason.contains("6 s"), "{reason}");
    assert!(reason.contains("last stage started: smoke"), "{reason}");
    then_good(&b).await;
    // each candidate had a worker of its own: the one of scripts and status lived on
    assert_eq!(
        pid(&b).await,
        before,
        "the worker of scripts was not killed"
    );
}

#[tokio::test]
async fn os_exit_is_a_crash_with_the_exit_status() {
    let dir = tempfile::tempdir().unwrap();
    let k = write(dir.path(), "kernel.py", &format!("{HEADER}import os, sys\ndef kernel_fn(x):\n    print('about to exit', file=sys.stderr)\n    os._exit(3)\n"));
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(&b, &k, true, 60).await;
    let Correctness::Crash { reason } = &r.correctness else {
        panic!("{:?}", r.correctness)
    };
    assert!(reason.contains("exit status 3"), "{reason}");
    assert!(
        reason.contains("about to exit"),
        "stderr tail missing: {reason}"
    );
    assert_eq!(r.kind, Some(autokernel_core::KernelKind::Softmax));
    then_good(&b).await;
}

#[tokio::test]
async fn a_segfault_is_a_crash_naming_the_signal() {
    let dir = tempfile::tempdir().unwrap();
    let k = write(
        dir.path(),
        "kernel.py",
        &format!("{HEADER}import ctypes\ndef kernel_fn(x):\n    return ctypes.string_at(0)\n"),
    );
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(&b, &k, true, 60).await;
    let Correctness::Crash { reason } = &r.correctness else {
        panic!("{:?}", r.correctness)
    };
    assert!(reason.contains("SIGSEGV"), "{reason}");
    then_good(&b).await;
}

#[tokio::test]
async fn a_raising_kernel_fails_smoke_and_the_next_request_passes() {
    let dir = tempfile::tempdir().unwrap();
    let k = write(
        dir.path(),
        "raises.py",
        &format!("{HEADER}def kernel_fn(x):\n    raise ValueError('boom')\n"),
    );
    let b = PyWorkerBenchmarker::with_worker(worker());
    let before = pid(&b).await;
    let r = bench(&b, &k, true, 60).await;
    let Correctness::Fail { stage, reason } = &r.correctness else {
        panic!("{:?}", r.correctness)
    };
    assert_eq!(*stage, Stage::Smoke);
    assert!(reason.contains("ValueError: boom"), "{reason}");
    // the line is named in the file the user gave
    assert!(reason.contains("raises.py line 6"), "{reason}");
    then_good(&b).await;
    assert_eq!(
        pid(&b).await,
        before,
        "the worker of scripts and status is not the candidates'"
    );
}

#[tokio::test]
async fn a_syntax_error_fails_load_with_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let k = write(
        dir.path(),
        "kernel.py",
        &format!("{HEADER}def kernel_fn(x)\n    return x\n"),
    );
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(&b, &k, true, 60).await;
    let Correctness::Fail { stage, reason } = &r.correctness else {
        panic!("{:?}", r.correctness)
    };
    assert_eq!(*stage, Stage::Load);
    assert!(
        reason.contains("SyntaxError") && reason.contains("line 5"),
        "{reason}"
    );
    // the hash is of the exact bytes
    let expected = {
        use sha2::Digest;
        format!("{:x}", sha2::Sha256::digest(std::fs::read(&k).unwrap()))
    };
    assert_eq!(r.source_sha256, expected);
    then_good(&b).await;
}

#[tokio::test]
async fn unbounded_allocation_gets_a_verdict_and_the_next_request_passes() {
    let dir = tempfile::tempdir().unwrap();
    // 1 GB blocks, never touched (no resident memory), until the address-space limit hits
    let k = write(dir.path(), "kernel.py", &format!("{HEADER}_hoard = []\ndef kernel_fn(x):\n    while True:\n        _hoard.append(torch.empty(2**30, dtype=torch.uint8))\n"));
    let b = PyWorkerBenchmarker::with_worker(Arc::new(
        autokernel_bench::Worker::new(options()).with_memory_limit_mb(12 * 1024),
    ));
    let r = bench(&b, &k, true, 60).await;
    assert!(
        matches!(
            r.correctness,
            Correctness::Fail { .. } | Correctness::Crash { .. }
        ),
        "{:?}",
        r.correctness
    );
    let reason = r.correctness.reason().unwrap_or_default();
    assert!(
        reason.to_lowercase().contains("alloc") || reason.contains("memory"),
        "{reason}"
    );
    then_good(&b).await;
}
