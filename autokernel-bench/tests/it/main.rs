//! Integration tests of autokernel-bench against a real worker process (CPU, Triton's
//! interpreter). The worker is the test-only bin `autokernel-bench-worker`.

mod candidates;
mod code_swaps;
mod config_reads;
mod device_cases;
mod harness_cases;
mod launchers;
mod ops;
mod params;
mod poisoning;
mod reference;
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

/// A CPU worker with its address space limited to 12 GB, so a runaway allocation fails, and
/// no spare: most tests judge a candidate or two, and a spare started ahead would be killed
/// unused, its imports the CPU of the tests beside it (the spares are `warm.rs`'s and
/// `launchers.rs`'s subject).
pub fn worker() -> std::sync::Arc<Worker> {
    std::sync::Arc::new(
        Worker::new(options())
            .with_memory_limit_mb(12 * 1024)
            .with_spare_workers(0),
    )
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

/// A head-to-head of `candidate` against the softmax starter on the CPU at 8x128 float32,
/// `repetitions` interleaved.
pub fn softmax_compare(candidate: PathBuf, repetitions: u32) -> autokernel_core::CompareRequest {
    autokernel_core::CompareRequest {
        layout: Default::default(),
        params: Default::default(),
        incumbent: starter_path("softmax"),
        candidate,
        kind: autokernel_core::KernelKind::Softmax,
        device: Device::Cpu,
        timing: (
            autokernel_core::Shape(vec![8, 128]),
            autokernel_core::DType::Float32,
        ),
        repetitions,
        timeout: Duration::from_secs(120),
    }
}

/// The softmax starter, for "the next request succeeds" checks.
pub fn good_softmax() -> PathBuf {
    starter_path("softmax")
}

/// Benches the softmax starter after case `name` on the same worker (quick, `timeout_s`)
/// and adds a line to `wrong` unless it passes: a trick must harm no later candidate.
pub async fn the_starter_passes_after(
    b: &PyWorkerBenchmarker,
    name: &str,
    timeout_s: u64,
    wrong: &mut Vec<String>,
) {
    let honest = bench(b, &good_softmax(), true, timeout_s).await;
    if !honest.correctness.is_pass() {
        wrong.push(format!(
            "the starter after {name}: {:?}",
            honest.correctness
        ));
    }
}

/// Python defining `_softmax(x, dtype=None)`: the softmax of x's rows by a Triton kernel of
/// the file it is pasted into (one program per row), in `dtype` (x's by default). The judge
/// requires every call to launch a kernel of the candidate's own file and to dispatch no
/// computing torch op itself, so a test candidate that should be judged on its trick alone
/// computes with this. Needs `import torch` before it.
pub const SOFTMAX_KERNEL: &str = r#"import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def _softmax(x, dtype=None):
    x = x.contiguous()
    y = torch.empty(x.shape, dtype=dtype or x.dtype, device=x.device)
    n_cols = x.shape[-1]
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y


"#;
