//! The default [`Benchmarker`](autokernel_core::Benchmarker) of autokernel: a warm,
//! crash-proof, tamper-proof worker process that embeds CPython (pyo3) and judges Triton
//! kernels.
//!
//! In the loop (see `autokernel-core`), every candidate `kernel.py` the agent writes is
//! judged here: loaded from disk under a fresh module name, run through the correctness
//! stages (`load`, `smoke`, `shape_sweep`, `stability`, `determinism`, `edge`), timed
//! against the PyTorch reference (CUDA events, L2 flushed, the method of
//! `triton.testing.do_bench`), and re-checked on fresh
//! inputs (`integrity`).
//!
//! - [`Worker`]: the parent's handle on a long-lived child process (this crate's
//!   [`serve_worker`] hosted by some binary). JSON lines over pipes, a deadline per request,
//!   the process group killed on timeout, restarted after a crash, a CUDA error or
//!   tampering. [`Worker::call_script`] runs any Python function in it (the profiler uses it).
//! - [`PyWorkerBenchmarker`]: the `Benchmarker` built on a [`Worker`].
//! - [`judge`]: the output comparison, in Rust on `ndarray` views of float32 copies (shape,
//!   dtype, NaN/Inf rules, elementwise and relative-L2 tolerances, bitwise determinism).
//! - [`starter_source`]: the starter `kernel.py` of each kind.
//!
//! ```no_run
//! use autokernel_bench::{PyWorkerBenchmarker, WorkerOptions};
//! use autokernel_core::{BenchRequest, Benchmarker, Device};
//!
//! fn main() -> std::process::ExitCode {
//!     // The default worker is this same program started with the argument `worker`:
//!     // hand that process to the worker before anything else.
//!     if std::env::args().nth(1).as_deref() == Some("worker") {
//!         return autokernel_bench::serve_worker();
//!     }
//!     let runtime = tokio::runtime::Runtime::new().expect("a tokio runtime");
//!     runtime.block_on(async {
//!         let bench = PyWorkerBenchmarker::new(WorkerOptions::new(Device::Cpu));
//!         // a request's device (default: any) runs on the worker's, the CPU here
//!         match bench.bench(&BenchRequest::new("kernel.py")).await {
//!             Ok(result) => println!("{}", result.correctness.label()),
//!             Err(e) => eprintln!("{e}"),
//!         }
//!     });
//!     std::process::ExitCode::SUCCESS
//! }
//! ```
//!
//! # Embedding: the worker and libpython
//! - **The worker process.** [`WorkerProgram`]'s default is the current executable with the
//!   argument `worker`, so a program that uses it must call [`serve_worker`] first thing
//!   when given that argument (above). A worker started from a program that does not is
//!   refused with that hint rather than starting workers without end.
//! - **libpython.** The worker embeds CPython through pyo3, which links libpython at build
//!   time (`PYO3_PYTHON`), but the run-time search path (rpath) set by this crate's build
//!   script reaches only this crate's own binaries. An embedding binary adds it itself,
//!   or the loader may pick up another libpython of the same minor version (a system
//!   one) under the venv's standard library: depend on `pyo3` and, as a build dependency,
//!   `pyo3-build-config` (the versions of this workspace), with a `build.rs` that calls
//!   `pyo3_build_config::add_libpython_rpath_link_args()` (the `autokernel` binary's
//!   `build.rs` does exactly this). A worker that finds its libpython's version differs
//!   from the venv's (`pyvenv.cfg`) says so: a warning through `tracing` when it starts.
#![warn(missing_docs)]

mod benchmarker;
mod error;
pub mod judge;
mod private_dir;
pub mod problem;
mod protocol;
mod py;
mod python_env;
mod sandbox;
mod worker;

pub use benchmarker::{declared_kind, PyWorkerBenchmarker};
pub use error::WorkerError;
pub use private_dir::{private_dir_in, private_temp_dir};
pub use problem::{ProblemRequest, ProblemVerdict};
pub use python_env::{linked_python_version, resolve_python};
pub use sandbox::SandboxOptions;
pub use worker::bootstrap::serve_worker;
pub use worker::client::{
    default_spare_workers, Worker, WorkerOptions, WorkerProgram, WorkerStatus, MAX_SPARE_WORKERS,
    SPARE_WORKERS_ENV,
};

use autokernel_core::KernelKind;

/// The harness the worker runs (`python/harness.py`), embedded at build time.
pub(crate) const HARNESS_PY: &str = include_str!("../python/harness.py");
/// The catalogue's Python side (`python/catalogue.py`): each kind's input generator,
/// float32 reference and eager baseline. Public so that the operators' module
/// (`kernel_ops.py` of the root package) can ship beside it and import its references.
pub const CATALOGUE_PY: &str = include_str!("../python/catalogue.py");
/// Problems in KernelBench's format (`python/problems.py`): loading one, its cases' inputs
/// and weights, KernelBench's timing, and the trusted comparison ([`judge_problem`]).
pub(crate) const PROBLEMS_PY: &str = include_str!("../python/problems.py");

/// The starter `kernel.py` for `kind`: a correct, readable Triton kernel with
/// `KERNEL_KIND`, `CONFIG`, `TUNABLES` and `kernel_fn` (embedded from
/// `python/starters/<kind>.py` at build time).
pub fn starter_source(kind: KernelKind) -> &'static str {
    match kind {
        KernelKind::Matmul => include_str!("../python/starters/matmul.py"),
        KernelKind::Softmax => include_str!("../python/starters/softmax.py"),
        KernelKind::Layernorm => include_str!("../python/starters/layernorm.py"),
        KernelKind::Rmsnorm => include_str!("../python/starters/rmsnorm.py"),
        KernelKind::FlashAttention => include_str!("../python/starters/flash_attention.py"),
        KernelKind::FusedMlp => include_str!("../python/starters/fused_mlp.py"),
        KernelKind::CrossEntropy => include_str!("../python/starters/cross_entropy.py"),
        KernelKind::RotaryEmbedding => include_str!("../python/starters/rotary_embedding.py"),
        KernelKind::Reduce => include_str!("../python/starters/reduce.py"),
        KernelKind::AddRmsnorm => include_str!("../python/starters/add_rmsnorm.py"),
        KernelKind::AddLayernorm => include_str!("../python/starters/add_layernorm.py"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_starter_declares_its_own_kind() {
        for kind in KernelKind::ALL {
            let src = starter_source(kind);
            assert!(
                src.contains(&format!("KERNEL_KIND = \"{}\"", kind.name())),
                "{kind}"
            );
            assert!(src.contains("def kernel_fn("), "{kind}");
        }
    }
}
