//! The workspace folder: `autokernel.toml` (settings and the model it belongs to), the saved
//! plan, the verification result, and the paths of everything else a run writes.
//!
//! ```text
//! autokernel-workspace/
//!   autokernel.toml   settings; the model this workspace belongs to; the run tag
//!   program.md        the agent's playbook (a copy the user may edit)
//!   plan.json         the targets chosen from the profile
//!   results.tsv       one row per experiment
//!   targets/<id>/kernel.py   the experiments (git: one commit each)
//!   profiles/trace.json      the torch.profiler trace
//!   verify.json, report.md, progress.png, modes.png, autokernel.log, .autokernel/ (scratch)
//! ```

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use autokernel_core::{
    ExperimentRecord, InputsFn, ModelInput, ModelSource, ModelSpec, ResultsLog, Target,
};
use serde::{Deserialize, Serialize};

use crate::verification::{SavedVerification, Verification};

/// The workspace folder of a command not given one: `./autokernel-workspace`.
pub const DEFAULT_DIR: &str = "autokernel-workspace";

/// Which model a workspace belongs to, as recorded at its first run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelIdentity {
    /// Where it comes from.
    #[serde(flatten)]
    pub source: ModelSource,
    /// Constructor keyword arguments, as JSON text.
    #[serde(default)]
    pub kwargs: String,
    /// Input shape.
    #[serde(default)]
    pub input_shape: Vec<u64>,
    /// Dtype name as the user gave it; empty when defaulted (float16 on a GPU, float32 on
    /// the CPU), so that `--device auto` and `--device cpu` runs of one model match.
    #[serde(default)]
    pub dtype: String,
    /// Keyword inputs of forward (`--input`), as `NAME=SHAPE[:DTYPE]` text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<ModelInput>,
    /// The function that builds the inputs (`--inputs FILE.py:FUNC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs_fn: Option<InputsFn>,
    /// The checkpoint folder the weights come from (`--pretrained DIR`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pretrained: Option<PathBuf>,
}

impl ModelIdentity {
    /// From the model spec of a run; `dtype_given` is whether the user chose the dtype.
    pub fn of(spec: &ModelSpec, dtype_given: bool) -> Self {
        ModelIdentity {
            source: spec.source.clone(),
            kwargs: if spec.kwargs.is_null() {
                String::new()
            } else {
                spec.kwargs.to_string()
            },
            input_shape: spec.input_shape.clone(),
            dtype: if dtype_given {
                spec.dtype.to_string()
            } else {
                String::new()
            },
            inputs: spec.inputs.clone(),
            inputs_fn: spec.inputs_fn.clone(),
            pretrained: spec.pretrained.clone(),
        }
    }

    /// Whether `other` is the same model run the same way (a defaulted dtype matches any).
    pub fn same_model(&self, other: &ModelIdentity) -> bool {
        self.source == other.source
            && self.kwargs == other.kwargs
            && self.input_shape == other.input_shape
            && self.inputs == other.inputs
            && self.inputs_fn == other.inputs_fn
            && self.pretrained == other.pretrained
            && (self.dtype.is_empty() || other.dtype.is_empty() || self.dtype == other.dtype)
    }

    /// The label with the input shape, kwargs and dtype, for messages that compare two.
    pub fn describe(&self) -> String {
        let mut s = self.label();
        if !self.input_shape.is_empty() {
            let dims: Vec<String> = self.input_shape.iter().map(u64::to_string).collect();
            s.push_str(&format!(", input {}", dims.join("x")));
        }
        for input in &self.inputs {
            s.push_str(&format!(", input {input}"));
        }
        if let Some(f) = &self.inputs_fn {
            s.push_str(&format!(", inputs {f}"));
        }
        if let Some(dir) = &self.pretrained {
            s.push_str(&format!(", pretrained {}", dir.display()));
        }
        if !self.kwargs.is_empty() {
            s.push_str(&format!(", kwargs {}", self.kwargs));
        }
        if !self.dtype.is_empty() {
            s.push_str(&format!(", {}", self.dtype));
        }
        s
    }

    /// A short name for messages and the run tag.
    pub fn label(&self) -> String {
        match &self.source {
            ModelSource::File { path, class } => format!("{}:{class}", path.display()),
            ModelSource::Import { module, class } => format!("{module}:{class}"),
            ModelSource::Example { name } => format!("example {name}"),
        }
    }

    /// A ref-safe word for the run tag: the class or example name, lower-case.
    pub fn slug(&self) -> String {
        let raw = match &self.source {
            ModelSource::File { class, .. } | ModelSource::Import { class, .. } => class.clone(),
            ModelSource::Example { name } => name.clone(),
        };
        raw.chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .collect::<String>()
            .to_ascii_lowercase()
    }
}

/// User-supplied GPU figures for a GPU not in the table (`[gpu]` in autokernel.toml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuOverride {
    /// Dense FP16 TFLOP/s.
    pub fp16_tflops: f64,
    /// FP32 TFLOP/s.
    pub fp32_tflops: f64,
    /// Memory bandwidth GB/s (a measured copy bandwidth is best).
    pub mem_bandwidth_gb_s: f64,
    /// L2 MB.
    #[serde(default)]
    pub l2_mb: f64,
}

/// `autokernel.toml`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Settings {
    /// The model this workspace belongs to (set by the first `run`).
    pub model: Option<ModelIdentity>,
    /// The kernel file a `tune` workspace refines (set by its first `tune`); a workspace
    /// has a model or a tuned kernel, never both.
    #[serde(default)]
    pub tuned_kernel: Option<PathBuf>,
    /// Git's blob id of that file's text when the workspace started from it
    /// ([`autokernel_vcs::blob_id`]): a resumed `tune` refuses an edited file.
    #[serde(default)]
    pub tuned_kernel_blob: Option<String>,
    /// The run tag: the branch is `autokernel/<run_tag>`.
    pub run_tag: Option<String>,
    /// The agent: `tune`, `openai` or `hybrid`.
    pub agent: Option<String>,
    /// Device: `auto`, `cuda`, `cpu`.
    pub device: Option<String>,
    /// Number of targets taken from the plan.
    pub top: Option<usize>,
    /// Keep threshold as a fraction (0.01 = 1%).
    pub keep_threshold: Option<f64>,
    /// Consecutive non-kept experiments before moving on.
    pub plateau: Option<u32>,
    /// % of roofline at which a target is done.
    pub roofline_goal_pct: Option<f64>,
    /// Measured copy bandwidth in GB/s, overriding the GPU table.
    pub measured_bandwidth_gb_s: Option<f64>,
    /// Figures for a GPU not in the table.
    pub gpu: Option<GpuOverride>,
    /// LLM model name for `openai`/`hybrid`.
    pub llm_model: Option<String>,
    /// LLM base URL.
    pub llm_base_url: Option<String>,
    /// The deploy mode whose timings decide which kernels go in (`eager`, `cudagraph`,
    /// `compile`, `reduce-overhead`), as `run --deploy` last set it; `verify` without
    /// `--deploy` takes it.
    #[serde(default)]
    pub deploy: Option<String>,
}

/// An opened workspace folder.
#[derive(Debug, Clone)]
pub struct Workspace {
    /// Its root.
    pub root: PathBuf,
    /// Its settings as read (or defaults).
    pub settings: Settings,
}

impl Workspace {
    /// Opens (or creates) the folder and reads `autokernel.toml` when present.
    ///
    /// # Errors
    /// When the folder cannot be created or the settings file is not valid TOML.
    pub fn open(root: &Path) -> anyhow::Result<Self> {
        std::fs::create_dir_all(root)
            .with_context(|| format!("cannot create workspace `{}`", root.display()))?;
        let root = root
            .canonicalize()
            .with_context(|| format!("cannot resolve `{}`", root.display()))?;
        let file = root.join("autokernel.toml");
        let settings = if file.exists() {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read `{}`", file.display()))?;
            toml::from_str(&text)
                .with_context(|| format!("`{}` is not valid autokernel settings", file.display()))?
        } else {
            Settings::default()
        };
        Ok(Workspace { root, settings })
    }

    /// Opens an existing workspace, failing when it has no `results.tsv` yet.
    pub fn open_existing(root: &Path) -> anyhow::Result<Self> {
        if !root.join("results.tsv").exists() {
            bail!(
                "`{}` is not an autokernel workspace (no results.tsv)\nhint: run `autokernel run ... --workspace {}` first",
                root.display(),
                root.display()
            );
        }
        Self::open(root)
    }

    /// Writes `autokernel.toml`.
    pub fn save_settings(&self) -> anyhow::Result<()> {
        let text = toml::to_string_pretty(&self.settings).context("cannot serialise settings")?;
        let path = self.root.join("autokernel.toml");
        std::fs::write(
            &path,
            format!("# autokernel workspace settings (flags override these)\n{text}"),
        )
        .with_context(|| format!("cannot write `{}`", path.display()))
    }

    /// Path of a file in the workspace.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The saved plan, if any.
    pub fn load_plan(&self) -> anyhow::Result<Option<Vec<Target>>> {
        let p = self.path("plan.json");
        if !p.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&p)
            .with_context(|| format!("cannot read `{}`", p.display()))?;
        let targets: Vec<Target> = serde_json::from_str(&text)
            .with_context(|| format!("`{}` is not a plan", p.display()))?;
        check_target_ids(&targets).with_context(|| format!("`{}` is not a plan", p.display()))?;
        Ok(Some(targets))
    }

    /// Saves the plan.
    pub fn save_plan(&self, targets: &[Target]) -> anyhow::Result<()> {
        let p = self.path("plan.json");
        std::fs::write(&p, serde_json::to_string_pretty(targets)?)
            .with_context(|| format!("cannot write `{}`", p.display()))
    }

    /// The saved verification, if any.
    pub fn load_verification(&self) -> anyhow::Result<Option<Verification>> {
        let p = self.path("verify.json");
        if !p.exists() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&p).with_context(|| {
            format!(
                "cannot read `{}`\nhint: `autokernel verify --workspace {}` writes a new one (or delete the file)",
                p.display(),
                self.root.display()
            )
        })?;
        Ok(Some(serde_json::from_str(&text).with_context(|| {
            format!(
                "`{}` is not a verification\nhint: `autokernel verify --workspace {}` writes a new one (or delete the file)",
                p.display(),
                self.root.display()
            )
        })?))
    }

    /// Reads `verify.json` as the reports show it. Never fails: a file that cannot be read
    /// is a state of its own ([`SavedVerification::Unreadable`]), so that it loses no report.
    pub fn saved_verification(&self) -> SavedVerification {
        match self.load_verification() {
            Ok(None) => SavedVerification::None,
            Ok(Some(v)) => SavedVerification::Saved(v),
            Err(e) => SavedVerification::Unreadable(format!("{e:#}")),
        }
    }

    /// The targets whose kernel.py is not the one `verification` saw; none without a
    /// verification ([`Verification::changed_kernels`]).
    pub fn stale_kernels(
        &self,
        targets: &[Target],
        verification: Option<&Verification>,
    ) -> Vec<String> {
        verification
            .map(|v| v.changed_kernels(&self.root, targets))
            .unwrap_or_default()
    }

    /// Every row of `results.tsv` (read only: a log a run is appending to is never
    /// repaired from here), each with the head-to-head timing that decided it, from the
    /// experiment's note in the workspace's repository. Notes that cannot be read cost the
    /// rows their head-to-head figures only, with a warning.
    ///
    /// # Errors
    /// When `results.tsv` cannot be read or is not a results log.
    ///
    /// Rows that disagree with the verdict recorded with their commit, or repeat an
    /// experiment number, are left out with a warning each (`autokernel_core::audit_rows`):
    /// the loop did not write them.
    pub fn rows(&self) -> anyhow::Result<Vec<ExperimentRecord>> {
        let mut rows = ResultsLog::read(self.path("results.tsv"))?;
        let notes = match autokernel_vcs::read_notes(&self.root) {
            Ok(notes) => notes,
            Err(e) => {
                tracing::warn!("cannot read the experiments' notes (their verdicts and head-to-head timings): {e}");
                Default::default()
            }
        };
        let kept = autokernel_vcs::kept_verdicts(&notes);
        let keeps_verdicts = kept.values().any(|k| k.correctness.is_some());
        let mut set_aside = autokernel_core::audit_rows(&rows, &kept, keeps_verdicts)
            .into_iter()
            .peekable();
        let mut counted = Vec::with_capacity(rows.len());
        for (i, row) in rows.drain(..).enumerate() {
            match set_aside.next_if(|(j, _)| *j == i) {
                Some((_, why)) => {
                    tracing::warn!("{}", autokernel_core::SetAside { row, why })
                }
                None => counted.push(row),
            }
        }
        autokernel_vcs::merge_notes(&mut counted, &notes);
        Ok(counted)
    }

    /// Gives `rows` the head-to-head timings kept in their experiments' notes (rows of this
    /// workspace read from `results.tsv` lack them); notes that cannot be read cost the
    /// rows those figures only, with a warning.
    pub fn merge_notes(&self, rows: &mut [ExperimentRecord]) {
        match autokernel_vcs::read_notes(&self.root) {
            Ok(notes) => autokernel_vcs::merge_notes(rows, &notes),
            Err(e) => tracing::warn!(
                "cannot read the experiments' notes (their head-to-head timings): {e}"
            ),
        }
    }

    /// Saves the verification.
    pub fn save_verification(&self, v: &Verification) -> anyhow::Result<()> {
        let p = self.path("verify.json");
        std::fs::write(&p, serde_json::to_string_pretty(v)?)
            .with_context(|| format!("cannot write `{}`", p.display()))
    }
}

/// A workspace folder that did not exist before a command: removed on drop unless
/// [`CreatedFolder::keep`] was called (the command got as far as a plan), so that a run
/// that fails early (a model that does not load) leaves no folder behind.
#[derive(Debug)]
pub struct CreatedFolder {
    path: Option<PathBuf>,
}

impl CreatedFolder {
    /// Remembers `path` when it does not exist yet.
    pub fn new(path: &Path) -> Self {
        CreatedFolder {
            path: (!path.exists()).then(|| path.to_path_buf()),
        }
    }

    /// The folder has what makes it a workspace (a plan): keep it.
    pub fn keep(&mut self) {
        self.path = None;
    }
}

impl Drop for CreatedFolder {
    fn drop(&mut self) {
        if let Some(path) = self.path.take() {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

/// Checks that every target id is one the version store accepts ([`Target::id_is_valid`]:
/// a folder name and a git ref component) and that no id repeats: a hand-edited plan.json
/// with an id such as `../x` would put a kernel outside the workspace, and one with `/` or
/// a space used to be found only at the first commit.
fn check_target_ids(targets: &[Target]) -> anyhow::Result<()> {
    let mut seen = std::collections::BTreeSet::new();
    for t in targets {
        let id = t.id.as_str();
        if !Target::id_is_valid(id) {
            bail!(
                "target id `{id}` cannot name a directory: use 1 to 64 letters, digits, '-' and '_', not starting with '-' (e.g. `01-softmax`)"
            );
        }
        if !seen.insert(id) {
            bail!("target id `{id}` appears twice: each target needs its own id");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use autokernel_core::{DType, Device};

    #[test]
    fn a_plan_with_a_target_id_that_cannot_name_a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let plan = |ids: &[&str]| {
            let targets: Vec<serde_json::Value> = ids
                .iter()
                .map(|id| serde_json::json!({"id": id, "kind": "softmax", "shapes": [[8, 64]], "dtype": "float32", "fraction": 0.5, "op": "aten::_softmax"}))
                .collect();
            std::fs::write(
                ws.path("plan.json"),
                serde_json::to_string(&targets).unwrap(),
            )
            .unwrap();
            ws.load_plan()
        };
        assert_eq!(
            plan(&["01-softmax", "02-fused_mlp_v2"])
                .unwrap()
                .unwrap()
                .len(),
            2
        );
        for bad in [
            "../outside",
            "a/b",
            "a b",
            "",
            ".hidden",
            "-flag",
            "ü",
            "x.v2",
        ] {
            let err = format!("{:#}", plan(&["01-softmax", bad]).unwrap_err());
            assert!(
                err.contains(&format!("target id `{bad}` cannot name a directory")),
                "{err}"
            );
        }
        let err = format!("{:#}", plan(&["01-softmax", "01-softmax"]).unwrap_err());
        assert!(
            err.contains("target id `01-softmax` appears twice"),
            "{err}"
        );
    }

    #[test]
    fn settings_round_trip_through_toml() {
        let dir = tempfile::tempdir().unwrap();
        let mut ws = Workspace::open(dir.path()).unwrap();
        let spec = ModelSpec::example("tiny", Device::Cpu)
            .with_input_shape([1, 32])
            .with_dtype(DType::Float32);
        ws.settings.model = Some(ModelIdentity::of(&spec, true));
        ws.settings.run_tag = Some("20261129-tiny".into());
        ws.save_settings().unwrap();
        let again = Workspace::open(dir.path()).unwrap();
        assert_eq!(again.settings, ws.settings);
        let model = again.settings.model.unwrap();
        assert_eq!(model.slug(), "tiny");
        // a defaulted dtype matches a given one; another input shape does not
        let defaulted = ModelIdentity::of(&spec, false);
        assert!(model.same_model(&defaulted) && defaulted.same_model(&model));
        let other = ModelIdentity::of(
            &ModelSpec {
                input_shape: vec![1, 64],
                ..spec
            },
            true,
        );
        assert!(!model.same_model(&other));
        assert_eq!(other.describe(), "example tiny, input 1x64, float32");
    }

    #[test]
    fn inputs_and_weights_are_part_of_the_model_identity() {
        let dir = tempfile::tempdir().unwrap();
        let mut ws = Workspace::open(dir.path()).unwrap();
        let t5 = ModelSpec::import("transformers", "T5ForConditionalGeneration", Device::Cpu)
            .with_input("input_ids=1,16".parse().unwrap())
            .with_input("decoder_input_ids=1,8:int64".parse().unwrap())
            .with_pretrained("/ckpt/t5");
        ws.settings.model = Some(ModelIdentity::of(&t5, false));
        ws.save_settings().unwrap();
        let text = std::fs::read_to_string(dir.path().join("autokernel.toml")).unwrap();
        assert!(
            text.contains(
                "inputs = [\n    \"input_ids=1,16\",\n    \"decoder_input_ids=1,8:int64\",\n]"
            ),
            "{text}"
        );
        let again = Workspace::open(dir.path()).unwrap().settings.model.unwrap();
        assert_eq!(again, ModelIdentity::of(&t5, false));
        assert_eq!(
            again.describe(),
            "transformers:T5ForConditionalGeneration, input input_ids=1,16, \
             input decoder_input_ids=1,8:int64, pretrained /ckpt/t5"
        );
        // another decoder length, no checkpoint, or a function instead: another model run
        let mut shorter = t5.clone();
        shorter.inputs[1].shape = vec![1, 4];
        let mut random = t5.clone();
        random.pretrained = None;
        let built = t5
            .clone()
            .with_inputs_fn(InputsFn::new("/m/inputs.py", "make"));
        for other in [shorter, random, built] {
            assert!(
                !again.same_model(&ModelIdentity::of(&other, false)),
                "{other:?}"
            );
        }
        assert!(again.same_model(&ModelIdentity::of(&t5, true)));
    }
}
