//! `Worker::call_script` and `Benchmarker::compare` on a real worker.

use autokernel_bench::{PyWorkerBenchmarker, WorkerError};
use autokernel_core::{Benchmarker, CompareRequest, DType, Device, KernelKind, Shape};

use super::*;

#[tokio::test]
async fn call_script_returns_json_and_python_errors_carry_the_traceback() {
    let dir = tempfile::tempdir().unwrap();
    let s = write(
        dir.path(),
        "s.py",
        "import sys\ndef add(a, b):\n    print('noise on stdout must not break the channel')\n    return {'sum': a + b, 'exe': sys.executable}\ndef bad():\n    raise KeyError('nope')\n",
    );
    let w = worker();
    let v = w
        .call_script(
            &s,
            "add",
            serde_json::json!({"a": 2, "b": 3}),
            Duration::from_secs(120),
        )
        .await
        .unwrap();
    assert_eq!(v["sum"], 5);
    // the venv's interpreter is sys.executable (PyConfig adoption)
    assert_eq!(v["exe"].as_str().unwrap(), python().to_str().unwrap());
    let err = w
        .call_script(&s, "bad", serde_json::json!({}), Duration::from_secs(60))
        .await
        .unwrap_err();
    let WorkerError::Python { message, traceback } = err else {
        panic!("{err:?}")
    };
    assert_eq!(message, "KeyError: 'nope'");
    assert!(traceback.contains("line 6, in bad"), "{traceback}");
}

#[tokio::test]
async fn compare_times_both_kernels_interleaved() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let starter = starter_path("softmax");
    let c = b
        .compare(&CompareRequest {
            layout: Default::default(),
            incumbent: starter.clone(),
            candidate: starter,
            kind: KernelKind::Softmax,
            device: Device::Cpu,
            timing: (Shape(vec![8, 128]), DType::Float32),
            repetitions: 5,
            timeout: Duration::from_secs(120),
        })
        .await
        .unwrap();
    assert_eq!(c.repetitions, 5);
    assert!(
        c.incumbent_latency_us > 0.0 && c.candidate_latency_us > 0.0,
        "{c:?}"
    );
    // the same file against itself: the median ratio is near 1. Loose: a CPU wall clock
    // under the other tests of this binary (a 2-core machine once read 11x over 3 reps)
    assert!(c.median_speedup > 0.1 && c.median_speedup < 10.0, "{c:?}");
}
