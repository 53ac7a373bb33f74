//! The launcher signatures a candidate's worker reports reach the workers launched after
//! it, filtered (`worker/launchers.rs`; issue 21, point 1). On the CPU no launcher is built
//! (Triton's interpreter has none), so a later candidate reads what its worker was given.

use autokernel_bench::{PyWorkerBenchmarker, Worker};
use autokernel_core::Correctness;

use super::*;

#[tokio::test]
async fn launcher_signatures_reported_by_one_worker_reach_the_next_filtered() {
    let b = PyWorkerBenchmarker::with_worker(std::sync::Arc::new(
        Worker::new(options()).with_spare_workers(1),
    ));
    let dir = tempfile::tempdir().unwrap();
    let starter = std::fs::read_to_string(starter_path("softmax")).unwrap();
    // what a worker would report after its kernels' launchers were built, plus text a
    // hostile candidate adds, which must never reach a later worker
    let reports = write(
        dir.path(),
        "reports.py",
        &format!(
            "{starter}\nimport sys as _sys\n_sys.modules['harness']._LAUNCHER_SIGNATURES.update(\
             {{('*fp16', 'i32', 'constexpr'): None, ('i32); system(\"touch x\"); //',): None}})\n"
        ),
    );
    let first = bench(&b, &reports, true, 300).await;
    assert!(
        !matches!(first.correctness, Correctness::Crash { .. }),
        "{:?}",
        first.correctness
    );
    let reads = write(
        dir.path(),
        "reads.py",
        "import os\nraise RuntimeError('given ' + os.environ.get('AUTOKERNEL_WORKER_TRITON_LAUNCHERS', 'nothing'))\n",
    );
    // the spare that serves the next request was launched before that reply came (this
    // worker keeps one spare); the one after it was launched after the reply
    bench(&b, &reads, true, 300).await;
    let third = bench(&b, &reads, true, 300).await;
    let reason = third.correctness.reason().unwrap_or_default().to_string();
    assert!(
        reason.contains(r#"given [["*fp16","i32","constexpr"]]"#),
        "{reason}"
    );
    assert!(!reason.contains("system"), "{reason}");
}
