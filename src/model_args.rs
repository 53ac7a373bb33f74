//! The model flags shared by `run` and `profile`: which model, its constructor arguments
//! or checkpoint, its inputs and dtype, and how many forward passes to profile.

use std::path::PathBuf;

use anyhow::{bail, Context};
use autokernel_core::{DType, Device, InputsFn, ModelInput, ModelSource, ModelSpec};

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
    ///
    /// For a transformers model, the fields of its config (a key the config class does not
    /// have is an error naming the closest field); with --pretrained, overrides of the
    /// checkpoint's config.
    #[arg(long, value_name = "JSON", help_heading = "Model")]
    pub model_kwargs: Option<String>,
    /// Load the weights from a local checkpoint folder with from_pretrained (no download)
    ///
    /// For `--model transformers:Class` or any class with `from_pretrained`, e.g. a folder
    /// written by `model.save_pretrained(DIR)`:
    /// `--model transformers:GPT2LMHeadModel --pretrained ./gpt2-small --input-shape 1,1024`.
    #[arg(long, value_name = "DIR", help_heading = "Model")]
    pub pretrained: Option<PathBuf>,
    /// The shape of forward's one positional input, e.g. 1,1024 (batch, sequence)
    /// [default: the example's]
    ///
    /// Token ids in the vocab for a language model (a 1- or 2-D shape and a model with
    /// config.vocab_size or an nn.Embedding), random normal floats otherwise.
    #[arg(long, value_name = "DIMS", help_heading = "Model")]
    pub input_shape: Option<String>,
    /// A keyword input of forward, NAME=DIMS[:DTYPE] (repeatable), e.g. decoder_input_ids=1,8
    ///
    /// `*_mask` (attention_mask): all ones; token_type_ids: zeros; position_ids: 0..n-1;
    /// other `*_ids` or an int64/int32 DTYPE: random token ids in the vocab (the config's
    /// vocab_size); anything else: random normal floats in the model's dtype. DTYPE is
    /// int64, int32, bool, float16, bfloat16 or float32. With --input-shape too, its
    /// input is passed first, positionally. An encoder-decoder:
    /// `--model transformers:T5ForConditionalGeneration --input input_ids=1,512
    /// --input attention_mask=1,512 --input decoder_input_ids=1,128`.
    #[arg(long = "input", value_name = "NAME=DIMS[:DTYPE]", value_parser = parse_input, help_heading = "Model")]
    pub inputs: Vec<ModelInput>,
    /// A Python function that builds forward's inputs, FILE.py:FUNC
    ///
    /// Called as FUNC(model, device=..., dtype=...) (device and dtype only if it takes
    /// them) on the loaded model; returns (args, kwargs): `model(*args, **kwargs)` is
    /// what gets profiled and verified. For inputs --input cannot describe: images, a
    /// padded batch with a real mask, e.g.
    /// `def make(model, device, dtype): return (), {"pixel_values": torch.randn(1, 3, 224,
    /// 224, device=device, dtype=dtype)}`.
    #[arg(
        long = "inputs",
        value_name = "FILE.py:FUNC",
        value_parser = parse_inputs_fn,
        conflicts_with_all = ["inputs", "input_shape"],
        help_heading = "Model"
    )]
    pub inputs_fn: Option<InputsFn>,
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

/// Parses `--input NAME=DIMS[:DTYPE]`.
fn parse_input(text: &str) -> Result<ModelInput, String> {
    text.parse()
}

/// Parses `--inputs FILE.py:FUNC`: the file must exist (resolved to an absolute path, so a
/// resumed run from another folder finds it).
fn parse_inputs_fn(text: &str) -> Result<InputsFn, String> {
    let f: InputsFn = text.parse()?;
    let path = f
        .path
        .canonicalize()
        .map_err(|e| format!("`{}` of `{text}`: {e}", f.path.display()))?;
    Ok(InputsFn { path, ..f })
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
        let pretrained = match &self.pretrained {
            Some(dir) if !dir.is_dir() => bail!(
                "--pretrained `{}` is not a folder\nhint: pass the folder a checkpoint was saved to with `save_pretrained`",
                dir.display()
            ),
            Some(dir) => Some(
                dir.canonicalize()
                    .with_context(|| format!("cannot resolve `{}`", dir.display()))?,
            ),
            None => None,
        };
        let mut spec = ModelSpec::new(source, device)
            .with_kwargs(kwargs)
            .with_input_shape(input_shape)
            .with_dtype(dtype);
        for input in &self.inputs {
            spec = spec.with_input(input.clone());
        }
        if let Some(f) = &self.inputs_fn {
            spec = spec.with_inputs_fn(f.clone());
        }
        if let Some(dir) = pretrained {
            spec = spec.with_pretrained(dir);
        }
        Ok(spec)
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
            inputs: Vec::new(),
            inputs_fn: None,
            pretrained: None,
            dtype: None,
            iterations: autokernel_profiler::DEFAULT_ITERATIONS,
        }
    }

    #[test]
    fn inputs_and_a_checkpoint_reach_the_spec() {
        let dir = tempfile::tempdir().unwrap();
        let a = ModelArgs {
            model: Some("transformers:T5ForConditionalGeneration".into()),
            inputs: vec![
                parse_input("input_ids=1,16").unwrap(),
                parse_input("decoder_input_ids=1,8").unwrap(),
            ],
            pretrained: Some(dir.path().into()),
            ..args()
        };
        let s = a.spec(Device::Cpu).unwrap();
        assert!(s.input_shape.is_empty());
        assert_eq!(
            s.inputs,
            vec![
                ModelInput::new("input_ids", [1, 16]),
                ModelInput::new("decoder_input_ids", [1, 8])
            ]
        );
        assert_eq!(s.pretrained, Some(dir.path().canonicalize().unwrap()));
        let missing = ModelArgs {
            pretrained: Some("/nope/ckpt".into()),
            ..a
        };
        let e = missing.spec(Device::Cpu).unwrap_err().to_string();
        assert!(
            e.contains("--pretrained `/nope/ckpt` is not a folder"),
            "{e}"
        );
        let e = parse_inputs_fn("/nope/inputs.py:make").unwrap_err();
        assert!(e.contains("`/nope/inputs.py`"), "{e}");
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
