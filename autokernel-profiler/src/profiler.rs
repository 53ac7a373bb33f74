//! [`ChromeTraceProfiler`]: runs a model under `torch.profiler` inside the bench worker
//! (`python/profile_model.py`) and imports the Chrome trace it writes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use autokernel_bench::{Worker, WorkerError};
use autokernel_core::{Device, ModelSource, ModelSpec, ProfileError, ProfileReport, Profiler};

use crate::{import_trace, ImportedTrace, DEFAULT_ITERATIONS, DEFAULT_WARMUP};

/// The profiling script, run inside the worker.
pub const PROFILE_MODEL_PY: &str = include_str!("../python/profile_model.py");

/// The call-site matcher the profiling script imports from beside it (which module or call
/// a kernel kind can replace, at which parameters); verification's plugs and an exported
/// package use the same file.
pub const CALL_SITES_PY: &str = include_str!("../python/call_sites.py");

/// The bundled example models (`--example NAME`): name and source.
pub const EXAMPLES: [(&str, &str); 4] = [
    ("tiny", include_str!("../../examples/models/tiny.py")),
    ("gpt2", include_str!("../../examples/models/gpt2.py")),
    ("llama", include_str!("../../examples/models/llama.py")),
    ("bert", include_str!("../../examples/models/bert.py")),
];

/// Prefix of the Python exception message that means "the model is at fault".
const MODEL_ERROR: &str = "ModelError: ";

/// What `profile_model.py` reports besides the trace (its JSON summary: device, model
/// class, parameter count, input shape and kind, dtype, wrapped modules, iterations).
pub type ModelRun = serde_json::Value;

/// The default [`Profiler`]: profiles a model in the bench worker and imports the trace.
///
/// Holds the worker in an `Arc`, so the same warm process can serve the benchmarker.
#[derive(Debug, Clone)]
pub struct ChromeTraceProfiler {
    worker: Arc<Worker>,
    /// `None`: a private per-user folder under the temporary directory, made on first use.
    cache_dir: Option<PathBuf>,
    timeout: Duration,
    warmup: u32,
    iterations: u32,
    dtype_is_default: bool,
}

impl ChromeTraceProfiler {
    /// A profiler using `worker`; scripts go to a private cache folder of the user under
    /// the system's temporary directory (`autokernel_bench::private_temp_dir`: Python
    /// imports them, so no other user may write there); 600 s limit, [`DEFAULT_WARMUP`]
    /// warm-up and [`DEFAULT_ITERATIONS`] recorded iterations (forward passes).
    pub fn new(worker: Arc<Worker>) -> Self {
        ChromeTraceProfiler {
            worker,
            cache_dir: None,
            timeout: Duration::from_secs(600),
            warmup: DEFAULT_WARMUP,
            iterations: DEFAULT_ITERATIONS,
            dtype_is_default: false,
        }
    }

    /// Where `profile_model.py` and the example models are written (Python needs files):
    /// a folder the caller keeps private (it is used as given).
    pub fn with_cache_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.cache_dir = Some(dir.into());
        self
    }

    /// Time limit of one profiling run (loading, warm-up, recording, export).
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Warm-up iterations (not recorded) and recorded iterations (at least 1), each one
    /// forward pass of the model.
    pub fn with_iterations(mut self, warmup: u32, iterations: u32) -> Self {
        self.warmup = warmup;
        self.iterations = iterations.max(1);
        self
    }

    /// Marks the spec's dtype as a default rather than the user's choice: on a CPU a
    /// default half dtype is then run as float32.
    pub fn with_dtype_is_default(mut self, is_default: bool) -> Self {
        self.dtype_is_default = is_default;
        self
    }

    /// The worker it uses.
    pub fn worker(&self) -> &Arc<Worker> {
        &self.worker
    }

    /// Writes the script and the examples into the cache folder (each file written to a
    /// temporary name, then renamed, so concurrent runs never read half a file).
    fn materialise(&self) -> Result<(PathBuf, PathBuf), ProfileError> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let cache_dir = match &self.cache_dir {
            Some(dir) => dir.clone(),
            None => autokernel_bench::private_temp_dir(&format!(
                "profiler-{}",
                env!("CARGO_PKG_VERSION")
            ))
            .map_err(ProfileError::Worker)?,
        };
        let examples = cache_dir.join("examples");
        let failed = |path: &Path, e: std::io::Error| {
            ProfileError::Worker(format!(
                "cannot write the profiling scripts to `{}`: {e}",
                path.display()
            ))
        };
        std::fs::create_dir_all(&examples).map_err(|e| failed(&examples, e))?;
        let write = |path: PathBuf, text: &str| -> Result<PathBuf, ProfileError> {
            if std::fs::read_to_string(&path).ok().as_deref() == Some(text) {
                return Ok(path);
            }
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let tmp = path.with_extension(format!("tmp{}-{n}", std::process::id()));
            std::fs::write(&tmp, text).map_err(|e| failed(&tmp, e))?;
            std::fs::rename(&tmp, &path).map_err(|e| failed(&path, e))?;
            Ok(path)
        };
        let script = write(cache_dir.join("profile_model.py"), PROFILE_MODEL_PY)?;
        write(cache_dir.join("call_sites.py"), CALL_SITES_PY)?;
        for (name, text) in EXAMPLES {
            write(examples.join(format!("{name}.py")), text)?;
        }
        Ok((script, examples))
    }

    /// Runs the model under the profiler and writes the trace to `trace_out`; returns the
    /// script's summary.
    ///
    /// # Errors
    /// [`ProfileError::Model`] when the model cannot be loaded, built or run at the input
    /// shape (the Python message says what to change); [`ProfileError::Worker`] when the
    /// worker fails (environment, crash, timeout) or the cache folder cannot be written.
    pub async fn run_model(
        &self,
        model: &ModelSpec,
        trace_out: &Path,
    ) -> Result<ModelRun, ProfileError> {
        let (script, examples) = self.materialise()?;
        let device = match model.device {
            Device::Auto => "auto",
            Device::Cuda => "cuda",
            Device::Cpu => "cpu",
        };
        let mut kwargs = loader_kwargs(model);
        for (key, value) in [
            ("trace_path", serde_json::json!(absolute(trace_out))),
            ("dtype", serde_json::json!(model.dtype.name())),
            ("device", serde_json::json!(device)),
            ("examples_dir", serde_json::json!(examples)),
            ("warmup", serde_json::json!(self.warmup)),
            ("iterations", serde_json::json!(self.iterations)),
            ("dtype_is_default", serde_json::json!(self.dtype_is_default)),
        ] {
            kwargs[key] = value;
        }
        tracing::info!(model = ?model.source, trace = %trace_out.display(), "profiling model");
        self.worker
            .call_script(&script, "profile", kwargs, self.timeout)
            .await
            .map_err(map_worker_error)
    }

    /// [`Self::run_model`], then [`import_trace`] of the trace it wrote.
    ///
    /// # Errors
    /// As [`Self::run_model`] and [`import_trace`].
    pub async fn profile_imported(
        &self,
        model: &ModelSpec,
        trace_out: &Path,
    ) -> Result<(ImportedTrace, ModelRun), ProfileError> {
        let run = self.run_model(model, trace_out).await?;
        let mut imported = import_trace(trace_out)?;
        // the norm call sites the script matched: what the planner plans norms from
        imported.report.call_sites =
            serde_json::from_value(run["call_sites"].clone()).unwrap_or_default();
        crate::rank::apply_call_site_kinds(&mut imported.report);
        crate::rank::apply_chains(&mut imported.report);
        Ok((imported, run))
    }
}

fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// The keyword arguments that say which model to load and how to call it, as
/// `profile_model.py`'s `profile` and `load_for_call` (and so the verification script) take
/// them: `model`, `model_kwargs`, `input_shape`, `inputs`, `inputs_fn`, `pretrained`.
/// Profiling and verification both build them here, so that they load the same model and
/// call it on the same inputs.
pub fn loader_kwargs(model: &ModelSpec) -> serde_json::Value {
    let source = match &model.source {
        ModelSource::File { path, class } => serde_json::json!({
            "source": "file", "path": absolute(path), "class": class
        }),
        ModelSource::Import { module, class } => serde_json::json!({
            "source": "import", "module": module, "class": class
        }),
        ModelSource::Example { name } => serde_json::json!({"source": "example", "name": name}),
    };
    let model_kwargs = if model.kwargs.is_null() {
        serde_json::json!({})
    } else {
        model.kwargs.clone()
    };
    let inputs: Vec<serde_json::Value> = model
        .inputs
        .iter()
        .map(|i| serde_json::json!({"name": i.name, "shape": i.shape, "dtype": i.dtype}))
        .collect();
    let inputs_fn = model
        .inputs_fn
        .as_ref()
        .map(|f| serde_json::json!({"path": absolute(&f.path), "function": f.function}));
    serde_json::json!({
        "model": source,
        "model_kwargs": model_kwargs,
        "input_shape": model.input_shape,
        "inputs": inputs,
        "inputs_fn": inputs_fn,
        "pretrained": model.pretrained.as_deref().map(absolute),
    })
}

/// Maps the worker's errors: a `ModelError` raised by the script is the model's fault.
fn map_worker_error(e: WorkerError) -> ProfileError {
    match e {
        WorkerError::Python { message, traceback } => match message.strip_prefix(MODEL_ERROR) {
            Some(m) => ProfileError::Model(m.to_string()),
            None => ProfileError::Worker(format!("{message}\n{traceback}")),
        },
        other => ProfileError::Worker(other.to_string()),
    }
}

#[async_trait]
impl Profiler for ChromeTraceProfiler {
    async fn profile(
        &self,
        model: &ModelSpec,
        trace_out: &Path,
    ) -> Result<ProfileReport, ProfileError> {
        Ok(self.profile_imported(model, trace_out).await?.0.report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_errors_from_python_map_to_model() {
        let e = map_worker_error(WorkerError::Python {
            message: "ModelError: class `Foo` not found in `m.py`".into(),
            traceback: "tb".into(),
        });
        assert!(matches!(e, ProfileError::Model(ref m) if m == "class `Foo` not found in `m.py`"));
        let e = map_worker_error(WorkerError::Python {
            message: "KeyError: 'x'".into(),
            traceback: "line 3".into(),
        });
        assert!(
            matches!(e, ProfileError::Worker(ref m) if m.contains("KeyError") && m.contains("line 3"))
        );
    }

    #[test]
    fn every_example_declares_its_defaults() {
        for (name, text) in EXAMPLES {
            assert!(text.contains("EXAMPLE = {"), "{name}.py has no EXAMPLE");
            assert!(
                text.contains("\"input_shape\""),
                "{name}.py has no input_shape"
            );
        }
    }
}
