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

/// The dtypes a keyword input may name (`--input NAME=SHAPE:DTYPE`).
pub const INPUT_DTYPES: &[&str] = &["int64", "int32", "bool", "float16", "bfloat16", "float32"];

/// A keyword input of the model's forward: `--input NAME=SHAPE[:DTYPE]`, e.g.
/// `decoder_input_ids=1,8` or `pixel_values=1,3,224,224:float32`.
///
/// What it holds is chosen from its name and dtype when the model is loaded: a `*_mask` all
/// ones, `token_type_ids` zeros, `position_ids` 0..n-1, other `*_ids` (or an integer dtype)
/// random token ids in the model's vocab, anything else random normal floats in the model's
/// dtype. Written and read back as that text (in `autokernel.toml` too).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ModelInput {
    /// The keyword of forward, e.g. `input_ids`.
    pub name: String,
    /// Its shape, e.g. `[1, 16]`.
    pub shape: Vec<u64>,
    /// One of [`INPUT_DTYPES`]; `None` chooses from the name.
    pub dtype: Option<String>,
}

impl ModelInput {
    /// The input `name` of `shape`, its dtype chosen from its name.
    pub fn new(name: impl Into<String>, shape: impl Into<Vec<u64>>) -> Self {
        ModelInput {
            name: name.into(),
            shape: shape.into(),
            dtype: None,
        }
    }
}

impl std::fmt::Display for ModelInput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(u64::to_string).collect();
        write!(f, "{}={}", self.name, dims.join(","))?;
        if let Some(d) = &self.dtype {
            write!(f, ":{d}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for ModelInput {
    type Err = String;

    /// Parses `NAME=SHAPE[:DTYPE]`; the error says what was expected.
    fn from_str(text: &str) -> Result<Self, String> {
        let usage =
            "expected NAME=SHAPE[:DTYPE], e.g. input_ids=1,16 or pixel_values=1,3,224,224:float32";
        let Some((name, rest)) = text.split_once('=') else {
            return Err(format!("`{text}` has no `=`: {usage}"));
        };
        let name = name.trim();
        let is_ident = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !is_ident {
            return Err(format!(
                "`{name}` in `{text}` is not a keyword argument name: {usage}"
            ));
        }
        let (dims, dtype) = match rest.split_once(':') {
            Some((dims, dtype)) => (dims, Some(dtype.trim())),
            None => (rest, None),
        };
        let shape = dims
            .split([',', 'x'])
            .map(|p| p.trim().parse::<u64>().ok().filter(|v| *v > 0))
            .collect::<Option<Vec<u64>>>()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                format!("the shape `{dims}` of `{text}` is not positive integers separated by commas: {usage}")
            })?;
        if let Some(d) = dtype {
            if !INPUT_DTYPES.contains(&d) {
                return Err(format!(
                    "unknown dtype `{d}` in `{text}`; expected one of {}",
                    INPUT_DTYPES.join(", ")
                ));
            }
        }
        Ok(ModelInput {
            name: name.to_string(),
            shape,
            dtype: dtype.map(str::to_string),
        })
    }
}

impl TryFrom<String> for ModelInput {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<ModelInput> for String {
    fn from(input: ModelInput) -> String {
        input.to_string()
    }
}

/// A Python function that builds the model's inputs: `--inputs FILE.py:FUNC`. It is called
/// as `FUNC(model)` (with `device=` and `dtype=` when it takes them) on the loaded model
/// and returns `(args, kwargs)`, for inputs `--input` cannot describe (images, padded
/// batches). Written and read back as that text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct InputsFn {
    /// The `.py` file.
    pub path: PathBuf,
    /// The function's name in it.
    pub function: String,
}

impl InputsFn {
    /// The function `function` of the file `path`.
    pub fn new(path: impl Into<PathBuf>, function: impl Into<String>) -> Self {
        InputsFn {
            path: path.into(),
            function: function.into(),
        }
    }
}

impl std::fmt::Display for InputsFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.path.display(), self.function)
    }
}

impl std::str::FromStr for InputsFn {
    type Err = String;

    /// Parses `FILE.py:FUNC` (the last `:` splits, so a path may hold one).
    fn from_str(text: &str) -> Result<Self, String> {
        match text.rsplit_once(':') {
            Some((path, function)) if path.ends_with(".py") && !function.is_empty() => {
                Ok(InputsFn::new(path, function))
            }
            _ => Err(format!(
                "`{text}` is not FILE.py:FUNC, e.g. inputs.py:make_inputs (a function of the model returning (args, kwargs))"
            )),
        }
    }
}

impl TryFrom<String> for InputsFn {
    type Error = String;

    fn try_from(text: String) -> Result<Self, String> {
        text.parse()
    }
}

impl From<InputsFn> for String {
    fn from(f: InputsFn) -> String {
        f.to_string()
    }
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
    /// Keyword inputs of forward (`--input`), passed after the positional input of
    /// `input_shape` when there is one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<ModelInput>,
    /// A function that builds the inputs instead (`--inputs FILE.py:FUNC`); with it,
    /// `input_shape` and `inputs` stay empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_fn: Option<InputsFn>,
    /// A local checkpoint folder the model is loaded from with `from_pretrained`
    /// (`--pretrained DIR`; never a download); `None` builds it with random weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pretrained: Option<PathBuf>,
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
            inputs: Vec::new(),
            inputs_fn: None,
            pretrained: None,
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

    /// With one more keyword input of forward, e.g. `ModelInput::new("input_ids", [1, 16])`.
    pub fn with_input(mut self, input: ModelInput) -> Self {
        self.inputs.push(input);
        self
    }

    /// With its inputs built by a Python function ([`InputsFn`]).
    pub fn with_inputs_fn(mut self, inputs_fn: InputsFn) -> Self {
        self.inputs_fn = Some(inputs_fn);
        self
    }

    /// Loaded from the local checkpoint folder `dir` with `from_pretrained`.
    pub fn with_pretrained(mut self, dir: impl Into<PathBuf>) -> Self {
        self.pretrained = Some(dir.into());
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
    /// Number of calls of the op at these shapes, as `torch.profiler`'s `key_averages`
    /// counts them: one per module forward or outermost op call, whatever it launched.
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
    /// The norm and matmul modules the model called, with the parameters the profiler's
    /// matcher found (`call_sites.norm_call_sites`, `matmul_call_sites`); empty for an imported trace, which has no model
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
    /// How the module hands its inputs over (matmul: `nn.Linear`'s weight b_transposed,
    /// GPT-2's `Conv1D` contiguous); contiguous for the other kinds and older reports.
    #[serde(default)]
    pub layout: crate::Layout,
    /// Module instances called at this shape.
    pub instances: u32,
    /// Their calls in one forward pass.
    pub calls: u64,
    /// A fused chain's (`add_rmsnorm`, `add_layernorm`): the device time of one call of the
    /// residual add that feeds the norm, in microseconds, timed while profiling (the trace
    /// books the add to the module that makes it, not to the norm); `None` for other kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_us: Option<f64>,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_input_parses_and_prints_back() {
        let i: ModelInput = "decoder_input_ids=1,8".parse().unwrap();
        assert_eq!(i, ModelInput::new("decoder_input_ids", [1, 8]));
        let i: ModelInput = "pixel_values=1x3x32x32:float32".parse().unwrap();
        assert_eq!(i.shape, vec![1, 3, 32, 32]);
        assert_eq!(i.dtype.as_deref(), Some("float32"));
        assert_eq!(i.to_string(), "pixel_values=1,3,32,32:float32");
        // through serde, as autokernel.toml holds it
        let json = serde_json::to_string(&i).unwrap();
        assert_eq!(json, "\"pixel_values=1,3,32,32:float32\"");
        assert_eq!(serde_json::from_str::<ModelInput>(&json).unwrap(), i);
    }

    #[test]
    fn a_bad_input_says_what_is_wrong() {
        let err = |t: &str| t.parse::<ModelInput>().unwrap_err();
        assert!(
            err("input_ids").contains("has no `=`"),
            "{}",
            err("input_ids")
        );
        assert!(err("input ids=1,2").contains("not a keyword argument name"));
        assert!(err("input_ids=1,0").contains("not positive integers"));
        assert!(err("input_ids=").contains("not positive integers"));
        let e = err("input_ids=1,2:long");
        assert!(
            e.contains("unknown dtype `long`") && e.contains("int64, int32"),
            "{e}"
        );
    }

    #[test]
    fn an_inputs_function_splits_at_the_last_colon() {
        let f: InputsFn = "C:/models/inputs.py:make".parse().unwrap();
        assert_eq!(f, InputsFn::new("C:/models/inputs.py", "make"));
        assert_eq!(f.to_string(), "C:/models/inputs.py:make");
        assert!("inputs.py"
            .parse::<InputsFn>()
            .unwrap_err()
            .contains("is not FILE.py:FUNC"));
        assert!("inputs:make".parse::<InputsFn>().is_err());
    }

    #[test]
    fn a_spec_without_the_new_fields_still_reads() {
        let old = r#"{"source":{"source":"example","name":"tiny"},"kwargs":null,"input_shape":[1,32],"dtype":"float32","device":"cpu"}"#;
        let spec: ModelSpec = serde_json::from_str(old).unwrap();
        assert_eq!(
            spec,
            ModelSpec::example("tiny", Device::Cpu).with_input_shape([1, 32])
        );
    }
}
