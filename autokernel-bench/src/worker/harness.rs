//! Rust's handle on the imported harness (`python/harness.py`): its functions, looked up
//! once before any candidate ran, the guards taken then, and the calls every request makes
//! (loading a kernel file, describing an exception).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use autokernel_core::{eval_dims, Catalogue, ElementType};

use pyo3::prelude::*;
use pyo3::types::PyList;
use serde::Deserialize;

use super::guards::Guards;
use super::torch_ops::TorchOps;

/// The harness functions Rust calls, looked up when the harness is imported.
const FUNCS: [&str; 19] = [
    "status",
    "load",
    "unload",
    "run_case",
    "call_script",
    "run_problem",
    "describe_exception",
    "guarded_names",
    "launcher_signatures",
    "reference_output",
    "timing_inputs",
    "timing_pools",
    "timed_call",
    "untimed_first_call",
    "timed_ops",
    "spin_up",
    "reference_eager",
    "reference_compiled",
    "launch_slot",
];

/// What the harness's `init` reports.
#[derive(Deserialize)]
struct InitMeta {
    device: String,
    device_name: String,
    import_s: f64,
    /// Per registered kind, what its input generator made at the catalogue's tiny shape.
    kinds: BTreeMap<String, KindReport>,
}

/// One registered kind's inputs at its tiny shape (float32 cases), or what it raised.
#[derive(Debug, Deserialize)]
pub(super) struct KindReport {
    /// `(name, shape, dtype)` of each input, in the generator's order.
    pub inputs: Vec<(String, Vec<u64>, String)>,
    /// The generator's, reference's or eager op's exception, when one raised.
    pub error: Option<String>,
}

/// Refuses a catalogue and a Python registry that disagree, naming the kind: a kind on one
/// side only, a generator or reference that raises at the tiny shape, or inputs whose
/// names, order, shapes or dtypes (judged in float32) are not the catalogue's.
///
/// # Errors
/// One message per disagreement, joined.
pub(super) fn check_agreement(
    catalogue: &Catalogue,
    registry: &BTreeMap<String, KindReport>,
) -> Result<(), String> {
    let mut problems = Vec::new();
    for spec in &catalogue.kinds {
        let kind = &spec.name;
        let Some(report) = registry.get(kind) else {
            problems.push(format!(
                "kind `{kind}` is in the catalogue but no Python reference and input generator are registered for it (catalogue.register)"
            ));
            continue;
        };
        if let Some(e) = &report.error {
            problems.push(format!(
                "kind `{kind}`: its Python side raised at the tiny shape {}: {e}",
                spec.tiny_shape
            ));
            continue;
        }
        // the tiny case runs at the default parameters: an input that exists only when a
        // parameter says so (flash_attention's mask) is not made then
        let inputs = spec.default_inputs();
        let want: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        let got: Vec<&str> = report.inputs.iter().map(|i| i.0.as_str()).collect();
        if got != want {
            problems.push(format!(
                "kind `{kind}`: the input generator makes inputs {got:?}, the catalogue names {want:?}"
            ));
            continue;
        }
        for (input, (name, shape, dtype)) in inputs.iter().zip(&report.inputs) {
            let want = eval_dims(&input.dims, &spec.dim_names, &spec.tiny_shape);
            let want_dt = match input.dtype {
                ElementType::Judged | ElementType::Float32 => "float32",
                ElementType::Int64 => "int64",
            };
            if want.as_ref() != Ok(shape) || dtype != want_dt {
                problems.push(format!(
                    "kind `{kind}`: input `{name}` is {shape:?} {dtype} at the tiny shape {}, the catalogue says {} {want_dt}",
                    spec.tiny_shape,
                    input.dims.join(", ")
                ));
            }
        }
    }
    for kind in registry.keys() {
        if catalogue.get(kind).is_none() {
            problems.push(format!(
                "kind `{kind}` is registered in Python but not in the catalogue (autokernel-core/src/catalogue.rs)"
            ));
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "the kernel catalogue and the Python registry disagree: {}",
            problems.join("; ")
        ))
    }
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
    /// Torch's callables the timed loop calls itself, captured before any candidate.
    pub torch: TorchOps,
    /// `cuda` or `cpu`.
    pub device: String,
    /// The GPU's name, or `cpu`.
    pub device_name: String,
    /// Seconds spent importing torch, triton and the harness.
    pub import_s: f64,
    /// The catalogue this worker judges by (sent by the parent when it started).
    pub catalogue: Catalogue,
}

impl Harness {
    /// Puts `dir` (where the embedded Python files were written) first on `sys.path`,
    /// imports the harness, initialises it for `device` (`auto`, `cuda` or `cpu`) with
    /// `catalogue` and the extra Python `registry_modules`, checks that the two agree
    /// ([`check_agreement`]), looks up its functions and takes the guards.
    ///
    /// # Errors
    /// The message of a `harness.SetupError` (the user's to fix, and it says how) or of a
    /// disagreement, else the Python traceback.
    pub(super) fn start(
        py: Python<'_>,
        dir: &Path,
        device: &str,
        catalogue: Catalogue,
        registry_modules: &[PathBuf],
        launchers_json: &str,
    ) -> Result<Harness, String> {
        let modules = serde_json::to_string(registry_modules).map_err(|e| e.to_string())?;
        let catalogue_json = catalogue.to_json();
        let run = || -> PyResult<Harness> {
            let sys = py.import("sys")?;
            let path = sys.getattr("path")?.cast_into::<PyList>()?;
            path.insert(0, dir.to_string_lossy().as_ref())?;
            let module = py.import("harness")?;
            let info: String = module
                .getattr("init")?
                .call1((
                    device,
                    catalogue_json.as_str(),
                    modules.as_str(),
                    launchers_json,
                ))?
                .extract()?;
            let info: InitMeta = serde_json::from_str(&info)
                .map_err(|e| pyo3::exceptions::PyValueError::new_err(e.to_string()))?;
            check_agreement(&catalogue, &info.kinds).map_err(SetupError::new_err)?;
            let mut funcs = HashMap::new();
            for f in FUNCS {
                funcs.insert(f, module.getattr(f)?.unbind());
            }
            Ok(Harness {
                funcs,
                guards: Guards::take(py, &module)?,
                torch: TorchOps::capture(py, &module)?,
                device: info.device,
                device_name: info.device_name,
                import_s: info.import_s,
                catalogue: catalogue.clone(),
            })
        };
        run().map_err(|e| {
            // harness.SetupError: the user's to fix, and its message says how
            let is_setup = e.get_type(py).name().is_ok_and(|n| n == "SetupError")
                || e.is_instance_of::<SetupError>(py);
            if is_setup {
                e.value(py).to_string()
            } else {
                python_error_text(py, &e)
            }
        })
    }

    /// The signatures of the Triton launchers built in this process so far
    /// (`harness.launcher_signatures`); empty when the call fails or returns something else
    /// (after a candidate ran, whatever it left behind).
    pub(super) fn launcher_signatures(&self, py: Python<'_>) -> Vec<Vec<String>> {
        self.func(py, "launcher_signatures")
            .call0()
            .and_then(|v| v.extract::<String>())
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok())
            .unwrap_or_default()
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

pyo3::create_exception!(
    autokernel_worker,
    SetupError,
    pyo3::exceptions::PyException,
    "A start-up problem whose message says what to fix (the catalogue and the registry disagree)."
);

/// Per-request failure that is not a verdict.
pub(super) enum Failure {
    /// The request or the harness is at fault; a message.
    Harness(String),
    /// The request asks for inputs the kind cannot make (parameters that do not fit the
    /// shape: harness.py's `InputsRefused`), found while a candidate is loaded: an error
    /// of the request, never a verdict on the candidate.
    Request(String),
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The registry's report of the built-in kinds as a correct Python side makes it.
    fn agreeing() -> BTreeMap<String, KindReport> {
        Catalogue::builtin()
            .kinds
            .iter()
            .map(|k| {
                let inputs = k
                    .default_inputs()
                    .into_iter()
                    .map(|i| {
                        let dims = eval_dims(&i.dims, &k.dim_names, &k.tiny_shape).unwrap();
                        let dt = if i.dtype == ElementType::Int64 {
                            "int64"
                        } else {
                            "float32"
                        };
                        (i.name.clone(), dims, dt.to_string())
                    })
                    .collect();
                (
                    k.name.clone(),
                    KindReport {
                        inputs,
                        error: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn a_registry_that_matches_the_catalogue_is_accepted() {
        check_agreement(Catalogue::builtin(), &agreeing()).unwrap();
    }

    #[test]
    fn a_kind_on_one_side_only_is_named() {
        let mut reg = agreeing();
        reg.remove("reduce");
        let err = check_agreement(Catalogue::builtin(), &reg).unwrap_err();
        assert!(
            err.contains("kind `reduce` is in the catalogue but no Python"),
            "{err}"
        );
        let mut reg = agreeing();
        reg.insert(
            "ghost".into(),
            KindReport {
                inputs: vec![],
                error: None,
            },
        );
        let err = check_agreement(Catalogue::builtin(), &reg).unwrap_err();
        assert!(
            err.contains("kind `ghost` is registered in Python but not"),
            "{err}"
        );
    }

    #[test]
    fn other_input_names_or_shapes_are_named_with_their_kind() {
        let mut reg = agreeing();
        reg.get_mut("layernorm").unwrap().inputs[2].0 = "b".into();
        let err = check_agreement(Catalogue::builtin(), &reg).unwrap_err();
        assert!(
            err.contains("kind `layernorm`") && err.contains("\"b\""),
            "{err}"
        );
        // rotary's cos is [seq, head_dim/2] = [8, 8] at the tiny shape [1, 2, 8, 16]
        let mut reg = agreeing();
        assert_eq!(reg["rotary_embedding"].inputs[1].1, vec![8, 8]);
        reg.get_mut("rotary_embedding").unwrap().inputs[1].1 = vec![8, 16];
        let err = check_agreement(Catalogue::builtin(), &reg).unwrap_err();
        assert!(
            err.contains("kind `rotary_embedding`: input `cos`"),
            "{err}"
        );
    }

    #[test]
    fn a_python_side_that_raises_is_named() {
        let mut reg = agreeing();
        reg.get_mut("softmax").unwrap().error = Some("KeyError: 'x'".into());
        let err = check_agreement(Catalogue::builtin(), &reg).unwrap_err();
        assert!(
            err.contains("kind `softmax`: its Python side raised"),
            "{err}"
        );
    }
}
