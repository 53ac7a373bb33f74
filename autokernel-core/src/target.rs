//! A [`Target`]: one kernel the loop optimises, with the model's shapes and its share of
//! the model's device time.

use serde::{Deserialize, Serialize};

use crate::{DType, KernelKind, Shape};

/// One kernel to optimise: a kind, the shapes the model calls it with, and its share of the
/// model's device time (the `f` of Amdahl's law).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Target {
    /// Stable identifier, also the folder name `targets/<id>/` in the workspace, e.g.
    /// `01-matmul` (letters, digits, `-` and `_` only).
    pub id: String,
    /// The kind of kernel.
    pub kind: KernelKind,
    /// The model's own shapes for this kernel (may be empty for a standalone target).
    pub shapes: Vec<Shape>,
    /// The dtype the model runs in.
    pub dtype: DType,
    /// Fraction of the model's total device time spent in this op, in `[0, 1]`.
    pub fraction: f64,
    /// The op or module it came from in the profile, e.g. `aten::addmm` or `LlamaRMSNorm`.
    pub op: String,
    /// How the model lays out the op's inputs in memory, so that the benchmark times the
    /// kernel (and PyTorch's op) on what the model hands it. Absent in older `plan.json`
    /// files: contiguous.
    #[serde(default)]
    pub layout: Layout,
}

/// How a target's inputs are laid out in memory when the model calls its op.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Layout {
    /// Every input contiguous (row-major): what `make_inputs` produces.
    #[default]
    Contiguous,
    /// matmul's `B` [K, N] is the transpose of a contiguous [N, K] tensor (strides
    /// `(1, K)`): `nn.Linear` computes `x @ weight.T` with its weight stored [out, in].
    /// A kernel benchmarked on a contiguous `B` can be faster than PyTorch there and
    /// slower inside the model (GPT-2's LM head on the H200, `docs/benchmarks.md`).
    BTransposed,
}

impl Layout {
    /// The name used on the command line, in `plan.json` and by the Python harness.
    pub fn name(self) -> &'static str {
        match self {
            Layout::Contiguous => "contiguous",
            Layout::BTransposed => "b_transposed",
        }
    }
}

impl std::fmt::Display for Layout {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Layout {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.replace('-', "_").as_str() {
            "contiguous" => Ok(Layout::Contiguous),
            "b_transposed" => Ok(Layout::BTransposed),
            other => Err(format!(
                "unknown layout `{other}`; expected contiguous or b_transposed"
            )),
        }
    }
}

impl Target {
    /// Checks that `id` is usable as a folder name and a git ref component.
    pub fn id_is_valid(id: &str) -> bool {
        !id.is_empty()
            && id.len() <= 64
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
            && !id.starts_with('-')
    }

    /// The path of its `kernel.py` relative to the workspace root: `targets/<id>/kernel.py`.
    pub fn kernel_relpath(&self) -> String {
        format!("targets/{}/kernel.py", self.id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layouts_parse_print_and_default_to_contiguous_in_old_plans() {
        assert_eq!("b-transposed".parse::<Layout>(), Ok(Layout::BTransposed));
        assert_eq!(Layout::BTransposed.to_string(), "b_transposed");
        assert!("column_major".parse::<Layout>().is_err());
        let old = r#"{"id":"01-matmul","kind":"matmul","shapes":[],"dtype":"float16","fraction":0.5,"op":"Linear"}"#;
        let t: Target = serde_json::from_str(old).unwrap();
        assert_eq!(t.layout, Layout::Contiguous);
    }

    #[test]
    fn ids_must_be_folder_and_ref_safe() {
        assert!(Target::id_is_valid("01-matmul"));
        assert!(!Target::id_is_valid("../etc"));
        assert!(!Target::id_is_valid("a b"));
        assert!(!Target::id_is_valid(""));
        assert!(!Target::id_is_valid("-x"));
    }
}
