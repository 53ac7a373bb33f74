//! The model flags shared by `run` and `profile`: which model, its constructor arguments,
//! its input shape and dtype, and how many forward passes to profile.

use std::path::PathBuf;

use anyhow::{bail, Context};
use autokernel_core::{DType, Device, ModelSource, ModelSpec};

/// Bundled example models (`examples/models/<name>.py`).
pub const EXAMPLES: &[&str] = &["tiny", "gpt2", "llama", "bert"];

/// Which model to optimise.
#[derive(Debug, Clone, clap::Args)]
pub struct ModelArgs {
    /// A model: `FILE.py` (with --class) or an importable `module.path:Class`
    /// (e.g. `transformers:GPT2LMHeadModel`)
    #[arg(
        long,
        value_name = "FILE.py|MODULE:CLASS",
        help_heading = "Model",
        conflicts_with = "example"
    )]
    pub model: Option<String>,
    /// The nn.Module class in FILE.py
    #[arg(long = "class", value_name = "NAME", help_heading = "Model")]
    pub class_name: Option<String>,
    /// A bundled example model: tiny (CPU-sized), gpt2, llama, bert
    #[arg(long, value_name = "NAME", help_heading = "Model")]
    pub example: Option<String>,
    /// Constructor keyword arguments as a JSON object, e.g. '{"n_layer": 2}'
    #[arg(long, value_name = "JSON", help_heading = "Model")]
    pub model_kwargs: Option<String>,
    /// Input shape, e.g. 1,1024 (batch, sequence) for a language model [default: the example's]
    #[arg(long, value_name = "DIMS", help_heading = "Model")]
    pub input_shape: Option<String>,
    /// Dtype to run the model in [default: float16 on a GPU, float32 on the CPU]
    #[arg(long, value_name = "float16|bfloat16|float32", help_heading = "Model")]
    pub dtype: Option<String>,
    /// Forward passes recorded by the profiler, after 2 unrecorded warm-up passes; more
    /// passes average out noisy timings (CPU ones above all)
    #[arg(
        long,
        value_name = "N",
        default_value_t = autokernel_profiler::DEFAULT_ITERATIONS,
        value_parser = parse_iterations,
        help_heading = "Model"
    )]
    pub iterations: u32,
}

/// Parses `--iterations`: a whole number of forward passes, at least 1.
fn parse_iterations(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(0) => Err(
            "0 forward passes would record nothing to rank; pass 1 or more (more average out noisy timings)"
                .into(),
        ),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "`{text}` is not a whole number of forward passes, e.g. 10"
        )),
    }
}

impl ModelArgs {
    /// Resolves the flags into a [`ModelSpec`] for `device`.
    ///
    /// # Errors
    /// Unknown example, a `.py` file without `--class`, bad JSON, a bad shape or dtype.
    pub fn spec(&self, device: Device) -> anyhow::Result<ModelSpec> {
        let source = match (&self.model, &self.example) {
            (Some(m), None) if m.ends_with(".py") => {
                let path = PathBuf::from(m);
                if !path.is_file() {
                    bail!("model file `{m}` not found");
                }
                let Some(class) = self.class_name.clone() else {
                    bail!("`--model {m}` needs `--class NAME`, the nn.Module class to load from it");
                };
                let path = path.canonicalize().with_context(|| format!("cannot resolve `{m}`"))?;
                ModelSource::File { path, class }
            }
            (Some(m), None) => match m.split_once(':') {
                // a file's path where a module's is expected: `model.py:Net`, `dir/model:Net`
                Some((file, class)) if file.ends_with(".py") => bail!(
                    "`--model {m}` names a file, but `module.path:Class` takes an importable module\nhint: pass the file and the class apart: `--model {file} --class {class}`"
                ),
                Some((path, class)) if path.contains(['/', '\\']) => bail!(
                    "`--model {m}`: `{path}` is not a module path (`package.module:Class` has dots, not slashes)\nhint: for a file, pass `--model FILE.py --class {class}`"
                ),
                Some((module, class)) if !module.is_empty() && !class.is_empty() => {
                    ModelSource::Import { module: module.into(), class: class.into() }
                }
                _ => bail!("`--model {m}` is neither a .py file nor `module.path:Class`"),
            },
            (None, Some(e)) => {
                if !EXAMPLES.contains(&e.as_str()) {
                    bail!("unknown example `{e}`; the bundled examples are: {}", EXAMPLES.join(", "));
                }
                ModelSource::Example { name: e.clone() }
            }
            (None, None) => bail!("no model given\nhint: pass `--example tiny`, `--model FILE.py --class NAME` or `--model module:Class`"),
            (Some(_), Some(_)) => bail!("give either --model or --example, not both"),
        };
        let kwargs = match &self.model_kwargs {
            Some(text) => {
                let v: serde_json::Value = serde_json::from_str(text)
                    .with_context(|| format!("--model-kwargs `{text}` is not valid JSON"))?;
                if !v.is_object() {
                    bail!("--model-kwargs must be a JSON object, got `{text}`");
                }
                v
            }
            None => serde_json::Value::Null,
        };
        let input_shape = match &self.input_shape {
            Some(s) => s
                .split([',', 'x'])
                .map(|p| p.trim().parse::<u64>().ok().filter(|v| *v > 0))
                .collect::<Option<Vec<u64>>>()
                .filter(|v| !v.is_empty())
                .with_context(|| {
                    format!("--input-shape `{s}` is not positive integers separated by commas")
                })?,
            None => Vec::new(),
        };
        let dtype = match &self.dtype {
            Some(d) => d.parse::<DType>()?,
            None if device == Device::Cpu => DType::Float32,
            None => DType::Float16,
        };
        Ok(ModelSpec {
            source,
            kwargs,
            input_shape,
            dtype,
            device,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args() -> ModelArgs {
        ModelArgs {
            model: None,
            class_name: None,
            example: None,
            model_kwargs: None,
            input_shape: None,
            dtype: None,
            iterations: autokernel_profiler::DEFAULT_ITERATIONS,
        }
    }

    #[test]
    fn iterations_must_be_a_positive_count() {
        assert_eq!(parse_iterations("10"), Ok(10));
        assert!(parse_iterations("0")
            .unwrap_err()
            .starts_with("0 forward passes would record nothing"));
        assert!(parse_iterations("-1")
            .unwrap_err()
            .contains("not a whole number"));
    }

    #[test]
    fn unknown_example_lists_the_bundled_ones() {
        let a = ModelArgs {
            example: Some("gpt5".into()),
            ..args()
        };
        let e = a.spec(Device::Cpu).unwrap_err().to_string();
        assert!(
            e.contains("unknown example `gpt5`") && e.contains("tiny, gpt2, llama, bert"),
            "{e}"
        );
    }

    #[test]
    fn module_class_and_defaults_resolve() {
        let a = ModelArgs {
            model: Some("transformers:GPT2LMHeadModel".into()),
            input_shape: Some("1,1024".into()),
            ..args()
        };
        let s = a.spec(Device::Cuda).unwrap();
        assert_eq!(
            s.source,
            ModelSource::Import {
                module: "transformers".into(),
                class: "GPT2LMHeadModel".into()
            }
        );
        assert_eq!(s.input_shape, vec![1, 1024]);
        assert_eq!(s.dtype, DType::Float16);
        assert_eq!(
            args()
                .spec(Device::Cpu)
                .unwrap_err()
                .to_string()
                .lines()
                .next()
                .unwrap(),
            "no model given"
        );
    }

    #[test]
    fn a_file_given_as_a_module_path_gets_the_file_and_class_syntax_as_a_hint() {
        let spec_error = |model: &str| {
            let a = ModelArgs {
                model: Some(model.into()),
                ..args()
            };
            a.spec(Device::Cpu).unwrap_err().to_string()
        };
        let e = spec_error("small_model.py:Net");
        assert_eq!(
            e,
            "`--model small_model.py:Net` names a file, but `module.path:Class` takes an importable module\n\
             hint: pass the file and the class apart: `--model small_model.py --class Net`"
        );
        let e = spec_error("models/small:Net");
        assert!(
            e.contains("`models/small` is not a module path")
                && e.contains("hint: for a file, pass `--model FILE.py --class Net`"),
            "{e}"
        );
    }

    #[test]
    fn missing_model_file_and_bad_kwargs_are_clear() {
        let a = ModelArgs {
            model: Some("/nope/model.py".into()),
            class_name: Some("M".into()),
            ..args()
        };
        assert!(a
            .spec(Device::Cpu)
            .unwrap_err()
            .to_string()
            .contains("`/nope/model.py` not found"));
        let a = ModelArgs {
            example: Some("tiny".into()),
            model_kwargs: Some("[1]".into()),
            ..args()
        };
        assert!(a
            .spec(Device::Cpu)
            .unwrap_err()
            .to_string()
            .contains("must be a JSON object"));
    }
}
