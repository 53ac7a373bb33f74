//! A [`Target`]: one kernel the loop optimises, with the model's shapes and its share of
//! the model's device time.

use serde::{Deserialize, Serialize};

use crate::{DType, KernelKind, Params, Shape};

/// One kernel to optimise: a kind, the shapes the model calls it with, and its share of the
/// model's device time (the `f` of Amdahl's law).
///
/// Built with [`Target::new`] and the `with_*` setters (fields may be added, so outside
/// this crate it cannot be written as a struct literal):
///
/// ```
/// use autokernel_core::{DType, KernelKind, Shape, Target};
/// let t = Target::new("01-softmax", KernelKind::Softmax)
///     .with_shapes(vec![Shape(vec![64, 1000])])
///     .with_dtype(DType::Float32);
/// assert_eq!(t.kernel_relpath(), "targets/01-softmax/kernel.py");
/// assert_eq!(t.fraction, 1.0);
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[non_exhaustive]
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
    /// The op's semantic parameters as the model calls it (`eps`, `bias`, …; the kind's
    /// [`crate::ParamSpec`]s), handed to the judge and to `kernel_fn`. A parameter not
    /// listed takes its default; absent in older `plan.json` files: every default, the
    /// semantics the kind had before it took parameters.
    #[serde(default, skip_serializing_if = "Params::is_empty")]
    pub params: Params,
    /// What the profile says can be won here, when its GPU is known (absent for a CPU
    /// profile, an unknown GPU and in older `plan.json` files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub headroom: Option<Headroom>,
}

/// PyTorch's own time per call at a target, as the profile measured it inside the model,
/// beside the best time a kernel can be expected to reach there.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Headroom {
    /// PyTorch's device time per call at the target's shape, in µs: the op's device time in
    /// the profile times the target's share of it, over its calls.
    pub pytorch_us: f64,
    /// The best time per call to expect, in µs: PyTorch's own where its op is a tuned
    /// library kernel ([`KernelKind::library_reference`]), else the kind's roofline at the
    /// shape ([`crate::GpuSpec::reachable_us`]), never above `pytorch_us`.
    pub reachable_us: f64,
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
    /// A standalone target: `id` (which should pass [`Target::id_is_valid`]: the loop uses
    /// it as a folder name and in git refs) of `kind`, with no model shapes (the kind's own
    /// shape sets are judged), in `float16`, taking all of the time (`fraction` 1), from no
    /// named op, with contiguous inputs. The `with_*` setters change each of these.
    pub fn new(id: impl Into<String>, kind: KernelKind) -> Self {
        Target {
            id: id.into(),
            kind,
            shapes: Vec::new(),
            dtype: DType::Float16,
            fraction: 1.0,
            op: String::new(),
            layout: Layout::Contiguous,
            params: Params::new(),
            headroom: None,
        }
    }

    /// Sets the model's shapes for this kernel; the first is the one timed.
    pub fn with_shapes(mut self, shapes: Vec<Shape>) -> Self {
        self.shapes = shapes;
        self
    }

    /// Sets the dtype the kernel is judged and timed in.
    pub fn with_dtype(mut self, dtype: DType) -> Self {
        self.dtype = dtype;
        self
    }

    /// Sets the share of the model's device time spent in this op, in `[0, 1]` (it weighs
    /// the target in the orchestrator's ranking and the projected end-to-end speedup).
    pub fn with_fraction(mut self, fraction: f64) -> Self {
        self.fraction = fraction;
        self
    }

    /// Sets the op or module the target came from, for reports.
    pub fn with_op(mut self, op: impl Into<String>) -> Self {
        self.op = op.into();
        self
    }

    /// Sets how the model lays out the op's inputs.
    pub fn with_layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Sets the op's semantic parameters (checked by the judge against the kind's
    /// [`crate::ParamSpec`]s, [`crate::KindSpec::resolve_params`]).
    pub fn with_params(mut self, params: Params) -> Self {
        self.params = params;
        self
    }

    /// Sets what the profile says can be won at the target.
    pub fn with_headroom(mut self, headroom: Headroom) -> Self {
        self.headroom = Some(headroom);
        self
    }

    /// The share of the model's time a kernel at [`Headroom::reachable_us`] would save,
    /// `fraction · (1 − reachable / pytorch)` (Amdahl's law per target), in `[0, fraction]`;
    /// `None` without a [`Headroom`].
    pub fn expected_saving(&self) -> Option<f64> {
        let h = self.headroom?;
        if h.pytorch_us <= 0.0 {
            return Some(0.0);
        }
        Some(self.fraction * (1.0 - h.reachable_us / h.pytorch_us).clamp(0.0, 1.0))
    }

    /// The [`Target::expected_saving`] for people, e.g. `saves ≤ 7.7% (PyTorch 100.0 µs
    /// a call, 22.8 at best)`, or `0.0%` with why for a library kernel; `None` without a
    /// [`Headroom`].
    pub fn saving_label(&self) -> Option<String> {
        let (h, saving) = (self.headroom?, self.expected_saving()?);
        Some(if self.kind.library_reference() {
            format!(
                "saves ≤ {:.1}% (PyTorch {:.1} µs a call, a tuned library kernel: parity at best)",
                saving * 100.0,
                h.pytorch_us
            )
        } else {
            format!(
                "saves ≤ {:.1}% (PyTorch {:.1} µs a call, {:.1} at best)",
                saving * 100.0,
                h.pytorch_us,
                h.reachable_us
            )
        })
    }

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
        // no params in an older plan: every parameter at its default; none written back
        assert!(t.params.is_empty());
        assert!(!serde_json::to_string(&t).unwrap().contains("params"));
        let p: Params = [("eps".to_string(), serde_json::json!(1e-5))].into();
        let t = t.with_params(p.clone());
        let back: Target = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.params, p);
    }

    #[test]
    fn a_new_target_has_the_documented_defaults_and_each_setter_sets_one_field() {
        let t = Target::new("01-matmul", KernelKind::Matmul);
        assert_eq!(
            (t.id.as_str(), t.kind, t.shapes.len(), t.dtype, t.fraction),
            ("01-matmul", KernelKind::Matmul, 0, DType::Float16, 1.0)
        );
        assert_eq!((t.op.as_str(), t.layout), ("", Layout::Contiguous));
        let t = t
            .with_shapes(vec![Shape(vec![8, 16, 32])])
            .with_dtype(DType::Bfloat16)
            .with_fraction(0.25)
            .with_op("aten::addmm")
            .with_layout(Layout::BTransposed);
        assert_eq!(t.shapes, vec![Shape(vec![8, 16, 32])]);
        assert_eq!((t.dtype, t.fraction), (DType::Bfloat16, 0.25));
        assert_eq!(
            (t.op.as_str(), t.layout),
            ("aten::addmm", Layout::BTransposed)
        );
        // the same target as plan.json writes it
        let json = serde_json::to_string(&t).unwrap();
        assert_eq!(serde_json::from_str::<Target>(&json).unwrap(), t);
    }

    #[test]
    fn ids_must_be_folder_and_ref_safe() {
        assert!(Target::id_is_valid("01-matmul"));
        assert!(!Target::id_is_valid("../etc"));
        assert!(!Target::id_is_valid("a b"));
        assert!(!Target::id_is_valid(""));
        assert!(!Target::id_is_valid("-x"));
    }

    #[test]
    fn the_expected_saving_is_amdahl_on_the_reachable_time() {
        let t = Target::new("01-layernorm", KernelKind::Layernorm).with_fraction(0.2);
        assert_eq!(t.expected_saving(), None);
        let h = |pytorch_us, reachable_us| Headroom {
            pytorch_us,
            reachable_us,
        };
        // 0.2 · (1 − 3/12)
        let t = t.with_headroom(h(12.0, 3.0));
        assert!((t.expected_saving().unwrap() - 0.15).abs() < 1e-12);
        // PyTorch already at (or past) the reachable time: nothing
        assert_eq!(
            t.clone().with_headroom(h(3.0, 4.0)).expected_saving(),
            Some(0.0)
        );
        let back: Target = serde_json::from_str(&serde_json::to_string(&t).unwrap()).unwrap();
        assert_eq!(back.headroom, Some(h(12.0, 3.0)));
    }
}
