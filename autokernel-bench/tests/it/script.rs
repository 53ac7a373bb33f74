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
            params: Default::default(),
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

#[tokio::test]
async fn a_kernel_that_tampers_only_when_loaded_for_the_comparison_gets_no_comparison() {
    let dir = tempfile::tempdir().unwrap();
    let honest = std::fs::read_to_string(starter_path("softmax")).unwrap();
    // behaves while judged; in the head-to-head (another kernel.py loaded beside it: every
    // candidate has a process of its own, so no state carries from one load to the next)
    // it rebinds torch.softmax
    let sly = format!(
        "{honest}\n_honest_fn = kernel_fn\n\ndef kernel_fn(*a, **k):\n    import sys\n    if sum(n.startswith('autokernel_candidate_') for n in sys.modules) > 1:\n        torch.softmax = lambda x, dim=-1, **kw: x\n    return _honest_fn(*a, **k)\n"
    );
    let k = write(dir.path(), "sly.py", &sly);
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(&b, &k, true, 120).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    let request = |candidate: PathBuf| softmax_compare(candidate, 1);
    let err = b.compare(&request(k.clone())).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("changed what the judge relies on: torch.softmax"),
        "{err}"
    );
    // the worker was restarted: an honest comparison on the same benchmarker works
    let c = b.compare(&request(starter_path("softmax"))).await.unwrap();
    assert_eq!(c.repetitions, 1);
}

#[tokio::test]
async fn a_benchs_figure_against_pytorch_is_the_median_of_interleaved_pairs() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    let r = bench(&b, &starter_path("rmsnorm"), true, 120).await;
    assert!(r.correctness.is_pass(), "{:?}", r.correctness);
    let m = r.metrics.expect("a PASS has metrics");
    // on the CPU (and with --quick) the candidate and the reference take 3 turns each
    assert_eq!(m.samples_us.len(), 3, "{m:?}");
    assert_eq!(m.reference_samples_us.len(), 3, "{m:?}");
    let median = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    assert_eq!(m.latency_us, median(&m.samples_us));
    assert_eq!(m.reference_latency_us, median(&m.reference_samples_us));
    // the speedup is the median of the paired ratios, as a head-to-head's, not the ratio
    // of the two medians
    let ratios: Vec<f64> = m
        .reference_samples_us
        .iter()
        .zip(&m.samples_us)
        .map(|(r, c)| r / c)
        .collect();
    let paired = median(&ratios);
    assert!(
        (m.speedup_vs_reference - paired).abs() <= 1e-12 * paired,
        "{} against the paired median {paired}",
        m.speedup_vs_reference
    );
}
