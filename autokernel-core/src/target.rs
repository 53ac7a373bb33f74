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
    fn ids_must_be_folder_and_ref_safe() {
        assert!(Target::id_is_valid("01-matmul"));
        assert!(!Target::id_is_valid("../etc"));
        assert!(!Target::id_is_valid("a b"));
        assert!(!Target::id_is_valid(""));
        assert!(!Target::id_is_valid("-x"));
    }
}
