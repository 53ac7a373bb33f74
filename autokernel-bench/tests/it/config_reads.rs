//! The timed call reports which `CONFIG` keys `kernel_fn` read (`Metrics::config_keys_read`),
//! the keys the tuner moves first.

use autokernel_bench::PyWorkerBenchmarker;
use autokernel_core::{BenchRequest, DType, Device, Shape};

use super::*;

/// A correct softmax (its own kernel, `SOFTMAX_KERNEL`) after `reads`, a body that touches
/// CONFIG.
fn kernel(reads: &str) -> String {
    format!(
        "import torch\nKERNEL_KIND = \"softmax\"\nCONFIG = {{\"A\": 1, \"B\": 2, \"C\": 3}}\nTUNABLES = {{\"A\": [1, 2]}}\n_seen = []\n\
         {SOFTMAX_KERNEL}def kernel_fn(x):\n    {reads}\n    return _softmax(x)\n"
    )
}

#[tokio::test]
async fn the_timed_call_reports_the_config_keys_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let b = PyWorkerBenchmarker::with_worker(worker());
    let cases = [
        // item, get and `in` each count; C is never read
        (
            "reads",
            "_ = CONFIG[\"A\"] + CONFIG.get(\"B\", 0) + (\"Z\" in CONFIG)",
            Some(vec!["A", "B", "Z"]),
        ),
        // read as a whole: every key may matter
        ("iterates", "_ = [CONFIG[k] for k in CONFIG]", None),
        ("items", "_ = sorted(CONFIG.items())", None),
        ("unpacks", "_ = dict(**CONFIG)", None),
        // never read
        ("ignores", "pass", None),
        // writes made during the recorded call stay written: the count never repeats
        (
            "counts",
            "CONFIG[\"n\"] = CONFIG.get(\"n\", 0) + 1\n    _seen.append(CONFIG[\"n\"])\n    \
             assert len(_seen) < 2 or _seen[-1] > _seen[-2], f\"CONFIG lost a write: {_seen}\"",
            Some(vec!["n"]),
        ),
        // a tensor written into CONFIG (a cache) is kept without comparing tensors
        // (`as_tensor`: `torch.tensor` dispatches `aten::detach_`, outside the allowlist)
        (
            "caches_a_tensor",
            "_ = CONFIG[\"A\"]\n    CONFIG[\"_last\"] = torch.as_tensor(list(x.shape))",
            Some(vec!["A"]),
        ),
        // a kernel that tells the recorder from a dict runs again on the dict: PASS, reads unknown
        (
            "checks_the_type",
            "assert type(CONFIG) is dict, \"CONFIG must be a plain dict\"",
            None,
        ),
        // a CONFIG the call replaces stays replaced: the count never repeats
        (
            "replaces",
            "global CONFIG\n    CONFIG = {**CONFIG, \"m\": CONFIG.get(\"m\", 0) + 1}\n    \
             _seen.append(CONFIG[\"m\"])\n    \
             assert len(_seen) < 2 or _seen[-1] > _seen[-2], f\"CONFIG lost a write: {_seen}\"",
            None,
        ),
    ];
    for (name, reads, want) in cases {
        let path = write(dir.path(), &format!("{name}.py"), &kernel(reads));
        let r = bench(&b, &path, true, 120).await;
        assert!(r.correctness.is_pass(), "{name}: {:?}", r.correctness);
        let got = r.metrics.expect("timed").config_keys_read;
        let want = want.map(|keys| keys.iter().map(|k| k.to_string()).collect::<Vec<_>>());
        assert_eq!(got, want, "{name}");
    }
}

/// The softmax starter reads different keys at rows held in registers and at wide rows;
/// the lists follow `kernel_fn`'s branches (on the CPU the shared-memory path is ruled out
/// before SMEM_CHUNK is read, and the loop's keys are read instead).
#[tokio::test]
async fn the_softmax_starter_reads_only_its_path_keys() {
    let b = PyWorkerBenchmarker::with_worker(worker());
    for (shape, want) in [
        (vec![8, 128], vec!["BLOCK_ROWS", "num_stages", "num_warps"]),
        (
            vec![2, 16400],
            vec![
                "LOOP_BLOCK",
                "LOOP_PROGRAMS_PER_SM",
                "LOOP_ROWS",
                "LOOP_WARPS",
                "num_stages",
            ],
        ),
    ] {
        let mut r = BenchRequest::new(starter_path("softmax"));
        r.device = Device::Cpu;
        r.quick = true;
        r.timing = Some((Shape(shape.clone()), DType::Float32));
        r.dtypes = vec![DType::Float32];
        let got = b.bench(&r).await.expect("the harness runs");
        assert!(
            got.correctness.is_pass(),
            "{shape:?}: {:?}",
            got.correctness
        );
        let keys = got.metrics.expect("timed").config_keys_read.expect("read");
        assert_eq!(keys, want, "{shape:?}");
    }
}
