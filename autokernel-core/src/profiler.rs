//! The [`Profiler`] trait and the [`ProfileReport`] it produces: where a model's device
//! time goes, grouped by the op a user recognises.

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::{DType, Device, KernelKind};

/// Where the model comes from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum ModelSource {
    /// A class in a Python file: `--model FILE.py --class NAME`.
    File {
        /// The `.py` file.
        path: PathBuf,
        /// The `nn.Module` subclass.
        class: String,
    },
    /// An importable class: `--model transformers:GPT2LMHeadModel`.
    Import {
        /// Module path, e.g. `transformers`.
        module: String,
        /// Class name.
        class: String,
    },
    /// A bundled example: `--example tiny`.
    Example {
        /// Its name (`tiny`, `gpt2`, `llama`, `bert`).
        name: String,
    },
}

/// A model and how to call it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSpec {
    /// Where the model comes from.
    pub source: ModelSource,
    /// Constructor keyword arguments (a JSON object).
    pub kwargs: serde_json::Value,
    /// Input shape, e.g. `[1, 1024]` (batch, sequence) for a language model; empty takes
    /// the model's default.
    pub input_shape: Vec<u64>,
    /// The dtype to run in.
    pub dtype: DType,
    /// Where to run.
    pub device: Device,
}

impl ModelSpec {
    /// A model from `source` on `device`, with the default dtype (float32 on the CPU,
    /// float16 elsewhere), no constructor arguments and the model's default input shape.
    pub fn new(source: ModelSource, device: Device) -> Self {
        ModelSpec {
            source,
            kwargs: serde_json::Value::Null,
            input_shape: Vec::new(),
            dtype: match device {
                Device::Cpu => DType::Float32,
                Device::Auto | Device::Cuda => DType::Float16,
            },
            device,
        }
    }

    /// A bundled example model (`tiny`, `gpt2`, `llama`, `bert`) on `device`.
    pub fn example(name: impl Into<String>, device: Device) -> Self {
        Self::new(ModelSource::Example { name: name.into() }, device)
    }

    /// An importable class, e.g. `("transformers", "GPT2LMHeadModel")`, on `device`.
    pub fn import(module: impl Into<String>, class: impl Into<String>, device: Device) -> Self {
        Self::new(
            ModelSource::Import {
                module: module.into(),
                class: class.into(),
            },
            device,
        )
    }

    /// The `nn.Module` subclass `class` of the Python file `path`, on `device`.
    pub fn file(path: impl Into<PathBuf>, class: impl Into<String>, device: Device) -> Self {
        Self::new(
            ModelSource::File {
                path: path.into(),
                class: class.into(),
            },
            device,
        )
    }

    /// With constructor keyword arguments (a JSON object).
    pub fn with_kwargs(mut self, kwargs: serde_json::Value) -> Self {
        self.kwargs = kwargs;
        self
    }

    /// With an input shape, e.g. `[1, 1024]` (batch, sequence).
    pub fn with_input_shape(mut self, shape: impl Into<Vec<u64>>) -> Self {
        self.input_shape = shape.into();
        self
    }

    /// In `dtype`.
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }
}

/// Device time spent in one op group of the profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpProfile {
    /// 1-based rank by device time.
    pub rank: usize,
    /// The op a user recognises: a module (`LlamaRMSNorm`), an aten op (`aten::mm`), a
    /// user annotation, or a kernel name.
    pub op: String,
    /// The kernel kind it maps to, or `None` for `other`.
    pub kind: Option<KernelKind>,
    /// Input shapes as recorded (`Input Dims`), one list per input.
    pub shapes: Vec<Vec<i64>>,
    /// Total device time, in microseconds.
    pub device_time_us: f64,
    /// Number of calls (kernel launches for device time, op calls for CPU time).
    pub calls: u64,
    /// Share of the total, in `[0, 1]`.
    pub fraction: f64,
    /// Names of the kernels that ran for it.
    pub kernels: Vec<String>,
}

/// Where a model's time goes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileReport {
    /// `cuda` with the GPU name, or `cpu` (then times are CPU self times, and said so).
    pub device: String,
    /// Sum of all kernel time, in microseconds.
    pub total_device_time_us: f64,
    /// Fraction of kernel launches whose device record was found, in `[0, 1]`.
    pub coverage: f64,
    /// What was repaired, skipped or uncertain.
    pub warnings: Vec<String>,
    /// Op groups, ranked by device time.
    pub ops: Vec<OpProfile>,
    /// The norm modules the model called, with the parameters the profiler's matcher found
    /// (`profile_model.norm_call_sites`); empty for an imported trace, which has no model
    /// to ask.
    #[serde(default)]
    pub call_sites: Vec<CallSite>,
}

/// One call site of a kind in the model: the module class, the kind's parameters as the
/// module computes them (decided by running its own forward), one problem shape and dtype,
/// and how many module instances and calls (per forward pass) are behind it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CallSite {
    /// The module's class, e.g. `LlamaRMSNorm`.
    pub module: String,
    /// The kind's name, e.g. `rmsnorm`.
    pub kind: String,
    /// The parameters at which a plug matches the module; `None` when none does.
    pub params: Option<crate::Params>,
    /// The problem shape (`[rows, cols]` for the norms).
    pub shape: Vec<u64>,
    /// The dtype of the module's input, e.g. `float32`.
    pub dtype: String,
    /// Why no plug matches (with the measured error), when `params` is `None`.
    pub reason: Option<String>,
    /// Module instances called at this shape.
    pub instances: u32,
    /// Their calls in one forward pass.
    pub calls: u64,
}

/// Errors from profiling or importing a trace.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileError {
    /// The trace file cannot be read.
    #[error("cannot read trace `{path}`")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a Chrome trace at all.
    #[error("`{path}` is not a Chrome trace: {reason}")]
    NotATrace {
        /// The file.
        path: PathBuf,
        /// What was found instead.
        reason: String,
    },
    /// The model could not be loaded or run (file/class not found, constructor failed,
    /// shape rejected); the message carries the Python error.
    #[error("model: {0}")]
    Model(String),
    /// The worker that runs the model failed.
    #[error("profiling worker: {0}")]
    Worker(String),
}

/// Produces a [`ProfileReport`] for a model.
#[async_trait]
pub trait Profiler: Send + Sync {
    /// Runs `model` under the profiler, writes the Chrome trace to `trace_out`, and imports it.
    ///
    /// # Errors
    /// [`ProfileError`] when the model cannot be loaded or run, or the trace not read.
    async fn profile(
        &self,
        model: &ModelSpec,
        trace_out: &Path,
    ) -> Result<ProfileReport, ProfileError>;
}
