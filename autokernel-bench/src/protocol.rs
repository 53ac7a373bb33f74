//! The JSON-lines protocol between the parent ([`crate::Worker`]) and the worker process.
//!
//! The parent writes one [`Envelope`] per line on the worker's stdin; the worker answers with
//! one [`Reply`] per line on a private duplicate of its original stdout (fd 1 itself points
//! at stderr, so whatever Python prints cannot corrupt the channel). Each reply echoes the
//! request's `id` and a random `nonce`; anything else on the channel is a protocol error.
//! Before the first request the worker sends a [`Hello`] line.

use std::path::PathBuf;

use autokernel_core::{DType, Layout, Params, Shape};
use serde::{Deserialize, Serialize};

/// Environment variables the parent sets for the worker.
pub(crate) mod env {
    /// The interpreter to adopt (PyConfig executable).
    pub const PYTHON: &str = "AUTOKERNEL_WORKER_PYTHON";
    /// `auto`, `cuda` or `cpu`.
    pub const DEVICE: &str = "AUTOKERNEL_WORKER_DEVICE";
    /// The kernel catalogue, as JSON (`Catalogue::to_json`).
    pub const CATALOGUE: &str = "AUTOKERNEL_WORKER_CATALOGUE";
    /// Extra Python registry modules, joined like `PATH`.
    pub const REGISTRY: &str = "AUTOKERNEL_WORKER_REGISTRY";
    /// Address-space limit (RLIMIT_AS) in MB, for tests of runaway allocation on the CPU.
    pub const MEMORY_LIMIT_MB: &str = "AUTOKERNEL_WORKER_MEMORY_LIMIT_MB";
    /// The sandbox to enter before Python starts (`sandbox::Spec` as JSON); unset for a
    /// worker that runs no candidate (status, scripts).
    pub const SANDBOX: &str = "AUTOKERNEL_WORKER_SANDBOX";
    /// Triton launcher signatures to build before any candidate is loaded, as a JSON array
    /// of arrays of argument type names (`worker::launchers`); unset: none.
    pub const TRITON_LAUNCHERS: &str = "AUTOKERNEL_WORKER_TRITON_LAUNCHERS";
}

/// One request line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Envelope {
    /// Sequence number, echoed.
    pub id: u64,
    /// Random per request, echoed: a forged reply would have to guess it.
    pub nonce: String,
    /// What to do.
    pub request: Request,
}

/// What the worker is asked to do.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum Request {
    /// Report pid and warmth.
    Status,
    /// Judge a kernel file (all stages, then timing).
    Bench(BenchJob),
    /// Time two kernel files interleaved.
    Compare(CompareJob),
    /// Run `function(**kwargs)` from a Python file.
    CallScript {
        /// The file.
        script: PathBuf,
        /// Function name in it.
        function: String,
        /// Keyword arguments (a JSON object).
        kwargs: serde_json::Value,
    },
}

/// A bench request as the worker sees it (the device is fixed per worker process).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct BenchJob {
    pub kernel_path: PathBuf,
    /// The kind's catalogue name; `None` takes the file's `KERNEL_KIND`.
    pub kind: Option<String>,
    pub extra_shapes: Vec<Shape>,
    pub timing: Option<(Shape, DType)>,
    /// Dtypes to judge; empty: the kind's for the device.
    #[serde(default)]
    pub dtypes: Vec<DType>,
    pub quick: bool,
    pub time_compiled: bool,
    pub gpu_bandwidth_gb_s: Option<f64>,
    /// How the inputs are laid out (`BenchRequest::layout`).
    #[serde(default)]
    pub layout: Layout,
    /// The kind's semantic parameters as requested (`BenchRequest::params`); the worker
    /// checks them against its catalogue and fills the defaults.
    #[serde(default)]
    pub params: Params,
}

/// A compare request as the worker sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CompareJob {
    pub incumbent: PathBuf,
    pub candidate: PathBuf,
    /// The kind's catalogue name.
    pub kind: String,
    pub timing: (Shape, DType),
    pub repetitions: u32,
    /// How the inputs are laid out.
    #[serde(default)]
    pub layout: Layout,
    /// The kind's semantic parameters as requested.
    #[serde(default)]
    pub params: Params,
}

/// The first line the worker writes: ready, or why not.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Hello {
    pub pid: u32,
    /// `Some` when start-up failed.
    pub error: Option<String>,
    /// `cuda` or `cpu`.
    pub device: String,
    /// GPU name or `cpu`.
    pub device_name: String,
    /// Seconds spent importing torch, triton and the harness.
    pub import_s: f64,
    /// Something the parent should tell the user though the worker is ready (a libpython
    /// of another version than the venv's interpreter).
    #[serde(default)]
    pub warning: Option<String>,
}

/// One reply line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Reply {
    pub id: u64,
    pub nonce: String,
    pub pid: u32,
    /// The worker exits after this reply (CUDA error, tampering): never reuse it.
    pub restart: bool,
    pub body: ReplyBody,
    /// After a candidate's request: the signatures of the Triton launchers built in the
    /// worker (argument type names), for the next workers (`worker::launchers`). Reported
    /// by a process the candidate ran in, so the parent keeps only well-formed ones.
    #[serde(default)]
    pub launchers: Vec<Vec<String>>,
}

/// The outcome of a request.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum ReplyBody {
    /// Success; the value depends on the request.
    Ok { value: serde_json::Value },
    /// Python raised outside a candidate (or in a script).
    PythonError { message: String, traceback: String },
    /// The harness could not do its job.
    Error { message: String },
}
