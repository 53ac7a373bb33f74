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
    /// Set (to `1`) for the trusted reference worker: it serves only
    /// [`super::Request::Reference`], [`super::Request::Deliver`],
    /// [`super::Request::TimeReference`] and status (`bootstrap.rs` refuses the rest), and
    /// makes itself undumpable so that no other process of the user's (a candidate without
    /// Landlock) can read its memory or open its pipes or payload area through `/proc`.
    pub const REFERENCE: &str = "AUTOKERNEL_WORKER_REFERENCE";
    /// The number of the inherited fd of the worker's payload area (`worker/payload.rs`),
    /// where its check outputs or references go; unset: none (a worker started by hand).
    pub const PAYLOAD_FD: &str = "AUTOKERNEL_WORKER_PAYLOAD_FD";
    /// The number of the inherited fd of the GPU lease file (`worker/lease.rs`); unset: no
    /// lease (on the CPU, a worker started by hand). `harness.gpu_lease` reads it too.
    pub const GPU_LEASE_FD: &str = "AUTOKERNEL_WORKER_GPU_LEASE_FD";
    /// The number of the inherited fd of a zygote's socket (`worker/zygote.rs`): set, the
    /// process is a zygote that forks workers instead of serving requests itself.
    pub const ZYGOTE_FD: &str = "AUTOKERNEL_WORKER_ZYGOTE_FD";
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
    /// The reference output of one case (trusted reference worker only): the reply's value
    /// is `{shape, note, bytes}`, and the worker keeps the output, `bytes` bytes of float32,
    /// in its own memory until [`Request::Deliver`].
    Reference(ReferenceJob),
    /// Writes the output of the last [`Request::Reference`] (native byte order, row-major)
    /// to the start of the worker's payload area (`worker/payload.rs`), which the parent
    /// sized before it asked; the reply's value is `{bytes}`. A separate step so that the
    /// parent can have a reference computed while a candidate's worker writes its outputs,
    /// and make it readable only once those outputs are in the parent's memory.
    Deliver,
    /// Times the reference (eager, and torch.compile when `compiled`) at `case` (trusted
    /// reference worker only): the reply's value is a [`ReferenceTiming`]. `spin_up`: the
    /// GPU's clocks are brought up first (`harness.spin_up`), as for any measurement that
    /// does not follow another within moments.
    TimeReference {
        case: ReferenceJob,
        quick: bool,
        compiled: bool,
        #[serde(default = "spin_up_default")]
        spin_up: bool,
    },
    /// Run a candidate's `ModelNew` on the cases of a problem in KernelBench's format
    /// (`harness.run_problem`): its outputs go to files in the worker's scratch folder, which
    /// the parent collects; the reply's value is `run_problem`'s JSON. Nothing compares them
    /// in this process ([`crate::judge_problem`]).
    Problem(ProblemJob),
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

/// A [`Request::Problem`] as the candidate's worker sees it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ProblemJob {
    /// The problem file (`class Model`, `get_inputs`, `get_init_inputs`).
    pub problem: PathBuf,
    /// The candidate file (`class ModelNew`).
    pub kernel: PathBuf,
    /// The cases, in order: a seed each, at the problem's own sizes or shrunk.
    pub cases: Vec<ProblemCase>,
    /// Timed calls at the first case; 0: not timed.
    pub trials: u32,
}

/// One case of a [`ProblemJob`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProblemCase {
    /// The seed set before the init inputs and the model (as KernelBench does); the inputs
    /// come from a seed the candidate's worker draws after the model is built.
    pub seed: u64,
    /// The size constants set for the case (name → value); empty at the problem's own sizes.
    pub sizes: std::collections::BTreeMap<String, u64>,
}

/// A [`Request::TimeReference`] without `spin_up` spins the GPU up, as before the field.
fn spin_up_default() -> bool {
    true
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

/// One case's inputs, as the harness's generator makes them (issue 21, point 1): the
/// trusted reference worker rebuilds them from this alone and computes the reference, so
/// that no reference ever exists in a candidate's process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct ReferenceJob {
    /// The kind's catalogue name.
    pub kind: String,
    pub shape: Shape,
    pub dtype: DType,
    /// The generator's seed.
    pub seed: u64,
    /// How the inputs are filled (`InputMode::name`).
    pub mode: String,
    /// How the inputs are laid out (`Layout::name`).
    pub layout: String,
    /// Every parameter of the kind, defaults filled, as a JSON object's text.
    pub params: String,
    /// For a timed call: where in its pool each input tensor was taken from
    /// (`worker::timing::Rotation`); `None`: the case's own inputs.
    #[serde(default)]
    pub offsets: Option<std::collections::BTreeMap<String, u64>>,
}

/// The reference's latencies at the timing case, from the trusted reference worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReferenceTiming {
    /// Eager PyTorch (the kind's `eager`, else its reference), µs.
    pub reference_latency_us: f64,
    /// torch.compile of it, µs, when asked for and it compiled.
    pub compiled_latency_us: Option<f64>,
    /// Why torch.compile failed, when it did.
    pub compiled_error: Option<String>,
    /// What the GPU was doing while the reference was timed.
    #[serde(default)]
    pub conditions: Option<autokernel_core::GpuConditions>,
    /// Eager PyTorch's µs in each repetition of an interleaved timing, in order
    /// (`reference_latency_us` their median); empty for one measurement.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub samples_us: Vec<f64>,
}

/// A line a candidate's worker writes on its reply channel in the middle of a request, to
/// ask the parent for what the candidate's process must never hold; the parent answers
/// with an [`Answer`] line on the worker's stdin. Echoes the request's `id` and `nonce`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Call {
    pub id: u64,
    pub nonce: String,
    pub call: ParentCall,
}

/// What a candidate's worker asks the parent.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub(crate) enum ParentCall {
    /// Compare the candidate's outputs with the reference of `case`, one per entry of
    /// `outputs` (its shape). The parent answers [`ParentAnswer::Ready`] once it admitted
    /// the check and sized the worker's payload area; the worker then copies the outputs
    /// there, one after the other as float32, and calls [`ParentCall::Written`].
    Check {
        stage: autokernel_core::Stage,
        case: ReferenceJob,
        outputs: Vec<Vec<usize>>,
    },
    /// The outputs of the [`ParentCall::Check`] just answered `Ready` are in the payload
    /// area; answered with [`ParentAnswer::Checked`].
    Written,
    /// The outputs of that check could not be written (`reason`: the map failed, out of
    /// address space): answered with [`ParentAnswer::Checked`], every output failed.
    NotWritten { reason: String },
    /// The reference's latencies at the timing case.
    TimeReference {
        case: ReferenceJob,
        quick: bool,
        compiled: bool,
    },
}

/// The parent's answer to a [`Call`].
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Answer {
    pub id: u64,
    pub nonce: String,
    pub answer: ParentAnswer,
}

/// What the parent answers.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub(crate) enum ParentAnswer {
    /// Per output, in order: its relative L2 error when it agrees with the reference, else
    /// why not (the judge's reason).
    Checked { results: Vec<Result<f64, String>> },
    /// The check is admitted and the payload area is large enough: write the outputs.
    Ready,
    /// [`ParentCall::TimeReference`]'s answer.
    Timed(ReferenceTiming),
    /// The parent could not get the reference (the reference worker failed): not the
    /// candidate's doing.
    Error { message: String },
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
