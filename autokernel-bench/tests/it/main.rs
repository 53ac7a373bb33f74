//! Integration tests of autokernel-bench against a real worker process (CPU, Triton's
//! interpreter). The worker is the test-only bin `autokernel-bench-worker`.

mod candidates;
mod code_swaps;
mod config_reads;
mod harness_cases;
mod params;
mod poisoning;
mod robustness;
mod sandbox;
mod script;
mod starters;
mod timing_cases;
mod toy_kind;
mod verdicts;
mod warm;

use std::path::{Path, PathBuf};
use std::time::Duration;

use autokernel_bench::{PyWorkerBenchmarker, Worker, WorkerOptions, WorkerProgram};
use autokernel_core::{BenchRequest, BenchResult, Benchmarker, Device};

/// The interpreter: `$AUTOKERNEL_PYTHON`, else the workspace's `.venv`, else the usual
/// resolution (`VIRTUAL_ENV`, `python3`).
pub fn python() -> PathBuf {
    if let Some(p) = std::env::var_os("AUTOKERNEL_PYTHON") {
        return p.into();
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.venv/bin/python");
    if venv.exists() {
        return venv;
    }
    autokernel_bench::resolve_python(None).expect("a python interpreter for the tests")
}

/// Options for a CPU worker hosted by the test-only bin.
pub fn options() -> WorkerOptions {
    WorkerOptions {
        python: Some(python()),
        program: WorkerProgram {
            exe: env!("CARGO_BIN_EXE_autokernel-bench-worker").into(),
            args: vec![],
        },
        device: Device::Cpu,
        gpu_bandwidth_gb_s: None,
    }
}

/// A CPU worker with its address space limited to 12 GB, so a runaway allocation fails.
pub fn worker() -> std::sync::Arc<Worker> {
    std::sync::Arc::new(Worker::new(options()).with_memory_limit_mb(12 * 1024))
}

/// The in-repo regression cases of `area` (`tests/cases/<area>/`, see its README); they
/// ship with the repository, so a missing folder is a broken checkout and fails loudly.
pub fn cases_dir(area: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/cases")
        .join(area);
    assert!(
        p.is_dir(),
        "in-repo cases folder not found at `{}`",
        p.display()
    );
    p
}

/// The shared cases folder of an area, when present (one source: `tests/support/`).
#[path = "../../../tests/support/shared_cases.rs"]
mod shared_cases;
pub use shared_cases::shared_cases_dir;

/// The starter file for `kind` in `python/starters/`.
pub fn starter_path(kind: &str) -> PathBuf {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("python/starters")
        .join(format!("{kind}.py"));
    assert!(p.exists(), "starter not found at `{}`", p.display());
    p
}

/// Writes `source` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, source: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, source).expect("write a test kernel");
    p
}

/// Benches `path` on the CPU with `timeout`.
pub async fn bench(
    b: &PyWorkerBenchmarker,
    path: &Path,
    quick: bool,
    timeout_s: u64,
) -> BenchResult {
    let mut r = BenchRequest::new(path);
    r.device = Device::Cpu;
    r.quick = quick;
    r.timeout = Duration::from_secs(timeout_s);
    b.bench(&r).await.expect("the harness runs")
}

/// The softmax starter, for "the next request succeeds" checks.
pub fn good_softmax() -> PathBuf {
    starter_path("softmax")
}
