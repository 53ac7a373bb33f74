//! Rust's handle on the imported harness (`python/harness.py`): its functions, looked up
//! once before any candidate ran, the guards taken then, and the calls every request makes
//! (loading a kernel file, describing an exception).

use std::collections::HashMap;
use std::path::Path;

use pyo3::prelude::*;
use pyo3::types::PyList;
use serde::Deserialize;

use super::guards::Guards;

/// The harness functions Rust calls, looked up when the harness is imported.
const FUNCS: [&str; 9] = [
    "status",
    "load",
    "unload",
    "run_case",
    "time_kernel",
    "compare",
    "call_script",
    "describe_exception",
    "guarded_names",
];

/// What the harness's `init` reports.
#[derive(Deserialize)]
struct InitMeta {
    device: String,
    device_name: String,
    import_s: f64,
}

/// What the harness's `load` reports.
#[derive(Deserialize)]
pub(super) struct LoadMeta {
    /// Whether the file compiled, imported and defines `kernel_fn`.
    pub ok: bool,
    /// The sha256 of the file's exact bytes (hex).
    pub sha256: String,
    /// The file's `KERNEL_KIND`, when it has one.
    pub kind: Option<String>,
    /// Why it did not load.
    pub message: Option<String>,
    /// The file's line the failure points at.
    pub line: Option<u32>,
    /// Whether importing it raised a CUDA error (the context is poisoned).
    #[serde(default)]
    pub cuda_error: bool,
}

/// The imported harness, with Rust's own references to everything it relies on.
pub(super) struct Harness {
    /// Harness functions, looked up once before any candidate ran.
    funcs: HashMap<&'static str, Py<PyAny>>,
    /// What a candidate must leave as it found it.
    pub guards: Guards,
    /// `cuda` or `cpu`.
    pub device: String,
    /// The GPU's name, or `cpu`.
    pub device_name: String,
    /// Seconds spent importing torch, triton and the harness.
    pub import_s: f64,
}

impl Harness {
    /// Puts `dir` (where the embedded Python files were written) first on `sys.path`,
    /// imports the harness, initialises it for `device` (`auto`, `cuda` or `cpu`), looks up
    /// its functions and takes the guards.
    ///
    /// # Errors
    /// The message of a `harness.SetupError` (the user's to fix, and it says how), else the
    /// Python traceback.
    pub(super) fn start(py: Python<'_>, dir: &Path, device: &str) -> Result<Harness, String> {
        let run = || -> PyResult<Harness> {
            let sys = py.import("sys")?;
            let path = sys.getattr("path")?.cast_into::<PyList>()?;
            path.insert(0, dir.to_string_lossy().as_ref())?;
            let module = py.import("harness")?;
            let info: String = module.getattr("init")?.call1((device,))?.extract()?;
            let info: InitMeta = serde_json::from_str(&info)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            let mut funcs = HashMap::new();
            for f in FUNCS {
                funcs.insert(f, module.getattr(f)?.unbind());
            }
            Ok(Harness {
                funcs,
                guards: Guards::take(py, &module)?,
                device: info.device,
                device_name: info.device_name,
                import_s: info.import_s,
            })
        };
        run().map_err(|e| {
            // harness.SetupError: the user's to fix, and its message says how
            let is_setup = e.get_type(py).name().is_ok_and(|n| n == "SetupError");
            if is_setup {
                e.value(py).to_string()
            } else {
                python_error_text(py, &e)
            }
        })
    }

    /// The harness function `name` (one of `FUNCS`), as looked up at start.
    pub(super) fn func<'py>(&self, py: Python<'py>, name: &str) -> Bound<'py, PyAny> {
        self.funcs
            .get(name)
            .map(|f| f.bind(py).clone())
            .expect("every name in FUNCS was looked up at start")
    }

    /// Whether the worker runs on a GPU (else the CPU with Triton's interpreter).
    pub(super) fn on_gpu(&self) -> bool {
        self.device == "cuda"
    }

    /// `(message, traceback, cuda_error)` of an exception, by the harness's
    /// `describe_exception` (the message alone when that fails).
    pub(super) fn describe(&self, py: Python<'_>, e: &PyErr) -> (String, String, bool) {
        let described = self
            .func(py, "describe_exception")
            .call1((e.value(py),))
            .and_then(|r| r.extract::<(String, String, bool)>());
        described.unwrap_or_else(|_| (e.to_string(), String::new(), false))
    }

    /// Loads the kernel file at `path` under a fresh module name: what the harness reports,
    /// and the candidate when it loaded.
    ///
    /// # Errors
    /// [`Failure::Python`] when the harness raised, [`Failure::Harness`] when its report
    /// cannot be read.
    pub(super) fn load<'py>(
        &self,
        py: Python<'py>,
        path: &Path,
    ) -> Result<(LoadMeta, Option<Bound<'py, PyAny>>), Failure> {
        let (meta, cand): (String, Bound<'py, PyAny>) = self
            .func(py, "load")
            .call1((path.to_string_lossy().as_ref(),))?
            .extract()?;
        let meta: LoadMeta =
            serde_json::from_str(&meta).map_err(|e| Failure::Harness(e.to_string()))?;
        Ok((meta, if cand.is_none() { None } else { Some(cand) }))
    }
}

/// Per-request failure that is not a verdict.
pub(super) enum Failure {
    /// The request or the harness is at fault; a message.
    Harness(String),
    /// A kernel changed what the judge relies on outside a bench (in a comparison).
    Tampered(String),
    /// Python raised in the harness.
    Python(PyErr),
}

impl From<PyErr> for Failure {
    fn from(e: PyErr) -> Self {
        Failure::Python(e)
    }
}

/// An exception's traceback followed by its message.
fn python_error_text(py: Python<'_>, e: &PyErr) -> String {
    let tb = e
        .traceback(py)
        .and_then(|t| t.format().ok())
        .unwrap_or_default();
    format!("{tb}{e}")
}
