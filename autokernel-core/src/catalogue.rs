//! The kernel catalogue: every kind's facts, written once. A [`KindSpec`] says what a kind's
//! `kernel_fn` takes and returns, at which shapes and dtypes it is judged, with which
//! tolerances and forbidden reference ops, and how its roofline figures are counted.
//!
//! [`Catalogue::builtin`] holds one entry per [`crate::KernelKind`], in `KernelKind::ALL`
//! order; `KernelKind`'s methods read it. The bench worker receives the catalogue as JSON
//! when it starts ([`Catalogue::to_json`]) and its Python side keeps only what must be
//! Python (references, input generators, starters), keyed by the same names; the worker
//! refuses to start when the two disagree. docs/kernels.md, "Adding a kind", lists the
//! places a new kind touches.

use std::sync::LazyLock;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::kernel::{Bound, DType, KernelKind, ParseError, Shape, ShapeSet, Tolerance};
use crate::params::{self, ParamError, ParamSpec, Params};

/// What an input is to the judge's input generator: which inputs follow the stability
/// stage's input mode (`large`, `zeros`, …) and which keep their usual values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum InputRole {
    /// Data the kernel transforms; follows the input mode.
    Data,
    /// A learned parameter (norm weight, MLP weight); random, whatever the mode.
    Weight,
    /// A fixed table (rotary cos/sin); always its real values.
    Table,
    /// Integer indices (class ids); ignore the mode.
    Index,
}

/// The element type of an input or output, relative to the dtype a case is judged in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ElementType {
    /// The case's dtype (float16, bfloat16 or float32).
    Judged,
    /// Always float32 (cross-entropy's loss).
    Float32,
    /// Always int64 (class ids).
    Int64,
}

/// One keyword argument of `kernel_fn`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputSpec {
    /// Its keyword name, e.g. `x`, `weight`.
    pub name: String,
    /// How the input generator fills it.
    pub role: InputRole,
    /// Its tensor shape as dim expressions over the kind's dim names (see [`eval_dims`]),
    /// e.g. `["M", "K"]`, `["seq", "head_dim/2"]`.
    pub dims: Vec<String>,
    /// Its element type.
    pub dtype: ElementType,
    /// The boolean parameter that must be true for the input to exist (layernorm's `bias`
    /// input when `bias=true`); `None`: always passed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub only_if: Option<String>,
}

/// What `kernel_fn` returns: a fresh tensor of these dims and element type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputSpec {
    /// Dim expressions (see [`eval_dims`]); empty for a 0-dim tensor.
    pub dims: Vec<String>,
    /// Its element type.
    pub dtype: ElementType,
}

/// A kind's shape sets (see [`ShapeSet`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShapeSets {
    /// Small shapes for Triton's interpreter on two cores.
    pub cpu: Vec<Shape>,
    /// Sizes of real models (and of the roofline targets).
    pub gpu: Vec<Shape>,
    /// Sizes that are not powers of two, to catch masking bugs.
    pub edge: Vec<Shape>,
}

/// The dtypes the shape sweep judges, per device class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DTypes {
    /// On a GPU.
    pub gpu: Vec<DType>,
    /// On the CPU. Triton's interpreter computes with numpy, which has no bfloat16.
    pub cpu: Vec<DType>,
}

/// Output tolerances per dtype (see [`crate::KernelKind::tolerance`] for the rule).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerances {
    /// For float16 outputs.
    pub float16: Tolerance,
    /// For bfloat16 outputs.
    pub bfloat16: Tolerance,
    /// For float32 outputs.
    pub float32: Tolerance,
}

impl Tolerances {
    /// The bounds shared by most kinds: one rounding of the output to the dtype (unit
    /// roundoff 2⁻¹¹ for float16, 2⁻⁸ for bfloat16) plus reordered float32 accumulation,
    /// with margin for long reductions. References are computed in float32.
    pub const DEFAULT: Tolerances = Tolerances {
        float16: Tolerance {
            atol: 1e-2,
            rtol: 1e-2,
            max_rel_l2: 5e-3,
        },
        bfloat16: Tolerance {
            atol: 2e-2,
            rtol: 2e-2,
            max_rel_l2: 2e-2,
        },
        float32: Tolerance {
            atol: 1e-4,
            rtol: 1e-4,
            max_rel_l2: 1e-4,
        },
    };

    /// The tolerance for outputs in `dtype`.
    pub fn get(&self, dtype: DType) -> Tolerance {
        match dtype {
            DType::Float16 => self.float16,
            DType::Bfloat16 => self.bfloat16,
            DType::Float32 => self.float32,
        }
    }
}

/// A kind's roofline formulas, as Rust functions of the problem shape's dims (as `f64`, in
/// the order of [`KindSpec::dim_names`]). Not serialised: a catalogue read from JSON gets
/// the built-in formulas back by kind name ([`Catalogue::from_json`]).
#[derive(Debug, Clone, Copy)]
pub struct Formulas {
    /// Floating-point operations of one call.
    pub flops: fn(&[f64]) -> f64,
    /// Minimum DRAM bytes of one call, given the bytes per element of the judged dtype.
    pub min_bytes: fn(&[f64], f64) -> f64,
}

/// The aten ops any candidate may dispatch at the top level of a profiled call (issue 21,
/// point 3: an allowlist, not a denylist): allocation, views, copies and casts, which move
/// or describe data but compute nothing of a reference. Everything else a candidate
/// dispatches itself (an op not nested inside another aten op, outside Triton's autotuner
/// benchmarking) is `TAMPER`, named; the result must come from Triton kernels launched by
/// the candidate's own file. `copy_`, `empty`, `new_empty` and `set_` are also what Triton's
/// CPU interpreter dispatches around every launch.
pub const ALLOWED_OPS: &[&str] = &[
    // allocation and fills
    "aten::empty",
    "aten::empty_like",
    "aten::empty_strided",
    "aten::new_empty",
    "aten::new_empty_strided",
    "aten::zeros",
    "aten::zeros_like",
    "aten::new_zeros",
    "aten::ones",
    "aten::ones_like",
    "aten::new_ones",
    "aten::full",
    "aten::full_like",
    "aten::new_full",
    "aten::scalar_tensor",
    "aten::fill_",
    "aten::zero_",
    "aten::resize_",
    "aten::set_",
    "aten::lift_fresh",
    "aten::lift_fresh_copy",
    // index data (positions, offsets), never the reference's values
    "aten::arange",
    // views
    "aten::view",
    "aten::view_as",
    "aten::view_as_real",
    "aten::view_as_complex",
    "aten::reshape",
    "aten::_reshape_alias",
    "aten::_unsafe_view",
    "aten::as_strided",
    "aten::contiguous",
    "aten::t",
    "aten::t_",
    "aten::numpy_T",
    "aten::mT",
    "aten::mH",
    "aten::adjoint",
    "aten::transpose",
    "aten::transpose_",
    "aten::swapaxes",
    "aten::swapdims",
    "aten::permute",
    "aten::movedim",
    "aten::moveaxis",
    "aten::expand",
    "aten::expand_as",
    "aten::broadcast_to",
    "aten::unsqueeze",
    "aten::unsqueeze_",
    "aten::squeeze",
    "aten::squeeze_",
    "aten::atleast_1d",
    "aten::atleast_2d",
    "aten::atleast_3d",
    "aten::flatten",
    "aten::unflatten",
    "aten::ravel",
    "aten::unfold",
    "aten::diagonal",
    "aten::select",
    "aten::slice",
    "aten::narrow",
    "aten::split",
    "aten::split_with_sizes",
    "aten::tensor_split",
    "aten::chunk",
    "aten::unbind",
    "aten::detach",
    "aten::detach_",
    "aten::alias",
    "aten::as_strided_",
    "aten::resolve_conj",
    "aten::resolve_neg",
    // copies and casts
    "aten::copy_",
    "aten::clone",
    "aten::cat",
    "aten::stack",
    "aten::hstack",
    "aten::vstack",
    // data moved or repeated, never combined (padding, grouped-query heads expanded)
    "aten::pad",
    "aten::constant_pad_nd",
    "aten::repeat",
    "aten::repeat_interleave",
    "aten::flip",
    "aten::to",
    "aten::_to_copy",
    "aten::type_as",
    // reading a scalar back, and stream bookkeeping
    "aten::item",
    "aten::_local_scalar_dense",
    "aten::record_stream",
];

/// Everything the judge and the tools know about one kind, but its Python (reference,
/// input generator, starter).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KindSpec {
    /// The snake-case name, as in `KERNEL_KIND` and `results.tsv`.
    pub name: String,
    /// One line: what it computes.
    pub summary: String,
    /// Names of the problem-shape dims (a [`Shape`] lists them in this order).
    pub dim_names: Vec<String>,
    /// `kernel_fn`'s keyword arguments, in order.
    pub inputs: Vec<InputSpec>,
    /// What `kernel_fn` returns.
    pub output: OutputSpec,
    /// Semantic parameters, passed to the input generator, the reference, the eager
    /// baseline and `kernel_fn` (keyword arguments); their defaults are the kind's
    /// semantics before it had them.
    #[serde(default)]
    pub params: Vec<ParamSpec>,
    /// Shape sets.
    pub shapes: ShapeSets,
    /// One small shape to run the reference once when the worker starts.
    pub tiny_shape: Shape,
    /// Dtypes judged per device class.
    pub dtypes: DTypes,
    /// Output tolerances per dtype.
    pub tolerances: Tolerances,
    /// Aten ops a candidate may not dispatch (the reference's own operation).
    pub forbidden_ops: Vec<String>,
    /// Aten ops a candidate of this kind may dispatch beyond [`ALLOWED_OPS`] (none for the
    /// built-in kinds; a kind added by a registry may need, say, an index op).
    #[serde(default)]
    pub allowed_ops: Vec<String>,
    /// Whether rows may hold -inf (attention masks, padded vocabularies): the stability
    /// stage then feeds the `masked` input mode.
    pub masked_rows: bool,
    /// Whether `autokernel verify` can plug it into a model (it has a standard call site).
    pub pluggable: bool,
    /// Memory- or compute-bound at its `gpu` shapes: the unit of its throughput.
    pub bound: Bound,
    /// FLOP and byte formulas; `None` for a kind read from JSON that is not built in (its
    /// throughput then reads 0).
    #[serde(skip)]
    pub formulas: Option<Formulas>,
}

impl PartialEq for KindSpec {
    /// Equal when every serialised fact is (formulas are functions and not compared).
    fn eq(&self, other: &Self) -> bool {
        serde_json::to_value(self).ok() == serde_json::to_value(other).ok()
    }
}

impl KindSpec {
    /// The aten ops a candidate of this kind may dispatch at the top level of a profiled
    /// call: [`ALLOWED_OPS`], then the kind's own [`KindSpec::allowed_ops`].
    pub fn allowed_ops(&self) -> Vec<&str> {
        ALLOWED_OPS
            .iter()
            .copied()
            .chain(self.allowed_ops.iter().map(String::as_str))
            .collect()
    }

    /// `shape` (one of the kind's own, as [`KindSpec::shapes`] gives them) made valid for
    /// the target's `params`: each dim that a given whole-number parameter must divide
    /// ([`ParamSpec::divides`]) rounded up to its next multiple (flash_attention's edge
    /// shape 1×3×37×64 judged with `kv_heads` 2 has 4 heads). Other shapes come back as
    /// they are; the shapes a model hands over are already valid and never fitted.
    pub fn fit_shape(&self, shape: &Shape, params: &Params) -> Shape {
        let mut dims = shape.0.clone();
        for p in &self.params {
            let (Some(dim), Some(k)) = (
                p.divides.as_deref(),
                params.get(&p.name).and_then(serde_json::Value::as_u64),
            ) else {
                continue;
            };
            if let (Some(i), true) = (self.dim_names.iter().position(|d| d == dim), k > 0) {
                if let Some(d) = dims.get_mut(i) {
                    *d = d.div_ceil(k) * k;
                }
            }
        }
        Shape(dims)
    }

    /// The shapes of `set`.
    pub fn shapes(&self, set: ShapeSet) -> &[Shape] {
        match set {
            ShapeSet::Cpu => &self.shapes.cpu,
            ShapeSet::Gpu => &self.shapes.gpu,
            ShapeSet::Edge => &self.shapes.edge,
        }
    }

    /// The dtypes judged on a GPU (`on_gpu`) or on the CPU.
    pub fn dtypes(&self, on_gpu: bool) -> &[DType] {
        if on_gpu {
            &self.dtypes.gpu
        } else {
            &self.dtypes.cpu
        }
    }

    /// The tolerance for outputs in `dtype`.
    pub fn tolerance(&self, dtype: DType) -> Tolerance {
        self.tolerances.get(dtype)
    }

    /// Every parameter of the kind for a target that sets `given`: the given values
    /// checked and in canonical form, the others at their defaults
    /// ([`crate::params::resolve`]).
    ///
    /// # Errors
    /// A [`ParamError`] naming the parameter and what it accepts.
    pub fn resolve_params(&self, given: &Params) -> Result<Params, ParamError> {
        params::resolve(&self.name, &self.params, given)
    }

    /// Input names, in order.
    pub fn input_names(&self) -> Vec<&str> {
        self.inputs.iter().map(|i| i.name.as_str()).collect()
    }

    /// The inputs passed at the parameters' defaults: those without `only_if`, and those
    /// whose `only_if` parameter defaults to true (layernorm's `bias`, not
    /// flash_attention's `mask`).
    pub fn default_inputs(&self) -> Vec<&InputSpec> {
        self.inputs_at(&Params::new())
    }

    /// The inputs passed at `params` (a parameter not given takes its default): those
    /// without `only_if`, and those whose `only_if` parameter is true there.
    pub fn inputs_at(&self, params: &Params) -> Vec<&InputSpec> {
        self.inputs
            .iter()
            .filter(|i| {
                i.only_if.as_ref().is_none_or(|flag| {
                    let value = params.get(flag).or_else(|| {
                        self.params
                            .iter()
                            .find(|s| &s.name == flag)
                            .map(|s| &s.default)
                    });
                    value == Some(&Value::Bool(true))
                })
            })
            .collect()
    }

    /// The output's tensor shape for the problem `shape`, and its dtype when the case is
    /// judged in `dtype`.
    ///
    /// # Errors
    /// A message when `shape` has the wrong rank or a dim expression does not evaluate.
    pub fn output_for(&self, shape: &Shape, dtype: DType) -> Result<(Vec<u64>, String), String> {
        let dims = eval_dims(&self.output.dims, &self.dim_names, shape)?;
        let dt = match self.output.dtype {
            ElementType::Judged => dtype.name(),
            ElementType::Float32 => "float32",
            ElementType::Int64 => "int64",
        };
        Ok((dims, dt.to_string()))
    }

    /// Floating-point operations of one call at `shape`; 0 without formulas.
    pub fn flops(&self, shape: &Shape) -> f64 {
        let d = as_f64(shape);
        self.formulas.map_or(0.0, |f| (f.flops)(&d))
    }

    /// Minimum DRAM bytes of one call at `shape` in `dtype`; 0 without formulas.
    pub fn min_bytes(&self, shape: &Shape, dtype: DType) -> f64 {
        let d = as_f64(shape);
        self.formulas
            .map_or(0.0, |f| (f.min_bytes)(&d, dtype.size_bytes() as f64))
    }

    /// Throughput of one call that took `latency_us` (µs), in the unit of [`Self::bound`]:
    /// GB/s of [`Self::min_bytes`] or TFLOP/s of [`Self::flops`]; 0 for a non-positive
    /// latency or without formulas.
    pub fn throughput(&self, shape: &Shape, dtype: DType, latency_us: f64) -> f64 {
        if latency_us <= 0.0 {
            return 0.0;
        }
        let seconds = latency_us * 1e-6;
        match self.bound {
            Bound::Memory => self.min_bytes(shape, dtype) / seconds / 1e9,
            Bound::Compute => self.flops(shape) / seconds / 1e12,
        }
    }
}

/// The dims of `shape` as `f64`, padded with zeros to eight so that a formula never
/// indexes past a shape of the wrong rank (it then reads 0).
fn as_f64(shape: &Shape) -> Vec<f64> {
    let mut d: Vec<f64> = shape.0.iter().map(|&v| v as f64).collect();
    d.resize(d.len().max(8), 0.0);
    d
}

/// Evaluates dim expressions against a problem shape: each expression is a dim name
/// (`cols`), a dim name divided by a positive integer (`head_dim/2`), or a positive integer
/// (`2`: the fused norms' output stacks two `[rows, cols]` tensors).
///
/// # Errors
/// A message naming the expression that is not a dim of `names`, or a shape whose rank is
/// not `names.len()`.
pub fn eval_dims(exprs: &[String], names: &[String], shape: &Shape) -> Result<Vec<u64>, String> {
    if shape.0.len() != names.len() {
        return Err(format!(
            "shape `{shape}` has {} dims, expected {} ({})",
            shape.0.len(),
            names.len(),
            names.join(", ")
        ));
    }
    exprs
        .iter()
        .map(|e| {
            if let Ok(n) = e.trim().parse::<u64>() {
                return if n > 0 {
                    Ok(n)
                } else {
                    Err(format!("dim `{e}` is 0"))
                };
            }
            let (name, div) = match e.split_once('/') {
                Some((n, d)) => (n.trim(), d.trim().parse::<u64>().ok().filter(|d| *d > 0)),
                None => (e.trim(), Some(1)),
            };
            let i = names.iter().position(|n| n == name);
            match (i, div) {
                (Some(i), Some(div)) => Ok(shape.0[i] / div),
                _ => Err(format!(
                    "dim `{e}` is not one of {} (optionally `/N`)",
                    names.join(", ")
                )),
            }
        })
        .collect()
}

/// Every kind's [`KindSpec`], looked up by name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Catalogue {
    /// The kinds, in catalogue order.
    pub kinds: Vec<KindSpec>,
}

static BUILTIN: LazyLock<Catalogue> = LazyLock::new(|| Catalogue {
    kinds: builtin::all(),
});

impl Catalogue {
    /// The built-in catalogue: one entry per [`crate::KernelKind`], in `KernelKind::ALL`
    /// order.
    pub fn builtin() -> &'static Catalogue {
        &BUILTIN
    }

    /// The kind named `name`.
    pub fn get(&self, name: &str) -> Option<&KindSpec> {
        self.kinds.iter().find(|k| k.name == name)
    }

    /// Names of its kinds, in order.
    pub fn names(&self) -> Vec<&str> {
        self.kinds.iter().map(|k| k.name.as_str()).collect()
    }

    /// This catalogue plus `spec` (replacing a kind of the same name): how a test or an
    /// extension adds a kind that has no [`crate::KernelKind`] variant.
    pub fn with(mut self, spec: KindSpec) -> Catalogue {
        match self.kinds.iter_mut().find(|k| k.name == spec.name) {
            Some(k) => *k = spec,
            None => self.kinds.push(spec),
        }
        self
    }

    /// The catalogue as one line of JSON (formulas left out).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a catalogue always serialises")
    }

    /// Reads a catalogue written by [`Catalogue::to_json`]; kinds named like a built-in
    /// kind get its formulas back.
    ///
    /// # Errors
    /// The JSON error, or a message naming a kind listed twice.
    pub fn from_json(text: &str) -> Result<Catalogue, String> {
        let mut c: Catalogue = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for (i, k) in c.kinds.iter().enumerate() {
            if c.kinds[..i].iter().any(|o| o.name == k.name) {
                return Err(format!("kind `{}` is listed twice", k.name));
            }
        }
        for k in &mut c.kinds {
            k.formulas = Catalogue::builtin().get(&k.name).and_then(|b| b.formulas);
        }
        Ok(c)
    }
}

/// The built-in entries, one function per kind.
mod builtin {
    use super::*;
    use crate::kernel::{Bound, DType, Shape};
    use crate::params::ParamType;
    use serde_json::json;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    fn shapes(v: &[&[u64]]) -> Vec<Shape> {
        v.iter().map(|d| Shape(d.to_vec())).collect()
    }

    fn input(name: &str, role: InputRole, dims: &[&str]) -> InputSpec {
        InputSpec {
            name: name.into(),
            role,
            dims: s(dims),
            dtype: if role == InputRole::Index {
                ElementType::Int64
            } else {
                ElementType::Judged
            },
            only_if: None,
        }
    }

    fn output(dims: &[&str]) -> OutputSpec {
        OutputSpec {
            dims: s(dims),
            dtype: ElementType::Judged,
        }
    }

    /// float32, float16 and bfloat16 on a GPU; float32 and float16 on the CPU (numpy has
    /// no bfloat16).
    fn dtypes() -> DTypes {
        DTypes {
            gpu: DType::ALL.to_vec(),
            cpu: vec![DType::Float32, DType::Float16],
        }
    }

    /// Long dot products in float32: accumulation in another order than cuBLAS (and no
    /// TF32: the precision policy turns it off for both sides).
    fn dot_products() -> Tolerances {
        Tolerances {
            float32: Tolerance {
                atol: 1e-3,
                rtol: 1e-3,
                max_rel_l2: 1e-4,
            },
            ..Tolerances::DEFAULT
        }
    }

    /// A spec with the defaults most kinds share; each entry overrides the rest.
    #[allow(clippy::too_many_arguments)]
    fn spec(
        name: &str,
        summary: &str,
        dim_names: &[&str],
        inputs: Vec<InputSpec>,
        out: OutputSpec,
        sets: [&[&[u64]]; 3],
        tiny: &[u64],
        forbidden: &[&str],
        bound: Bound,
        formulas: Formulas,
    ) -> KindSpec {
        KindSpec {
            name: name.into(),
            summary: summary.into(),
            dim_names: s(dim_names),
            inputs,
            output: out,
            params: Vec::new(),
            shapes: ShapeSets {
                cpu: shapes(sets[0]),
                gpu: shapes(sets[1]),
                edge: shapes(sets[2]),
            },
            tiny_shape: Shape(tiny.to_vec()),
            dtypes: dtypes(),
            tolerances: Tolerances::DEFAULT,
            forbidden_ops: s(forbidden),
            allowed_ops: Vec::new(),
            masked_rows: false,
            pluggable: true,
            bound,
            formulas: Some(formulas),
        }
    }

    use InputRole::{Data, Index, Table, Weight};

    const ROWS_COLS: &[&str] = &["rows", "cols"];
    const BHSD: &[&str] = &["batch", "heads", "seq", "head_dim"];
    const ROW_CPU: &[&[u64]] = &[&[8, 128], &[16, 256]];
    const ROW_EDGE: &[&[u64]] = &[&[7, 1000], &[33, 77]];

    // Formula sources. Matmul `2·M·N·K` (a multiply and an add per term). Causal attention
    // `2·(2·b·h·s²·d)/2`: QKᵀ and PV are each `2·b·h·s²·d`, halved by the causal mask
    // (FlashAttention-2, Dao 2023, §4). SwiGLU: three matmuls of `2·T·H·I`. Memory-bound
    // kinds count a handful of operations per element (softmax: max, subtract, exp, sum,
    // divide = 5); these only inform arithmetic intensity. Bytes: every input read once
    // and the output written once (roofline model, Williams, Waterman & Patterson, CACM
    // 52(4), 2009).

    fn matmul() -> KindSpec {
        spec(
            "matmul",
            "C = A @ B (+ bias, broadcast over the rows)",
            &["M", "N", "K"],
            vec![
                input("A", Data, &["M", "K"]),
                input("B", Data, &["K", "N"]),
                InputSpec {
                    only_if: Some("has_bias".into()),
                    ..input("bias", Weight, &["N"])
                },
            ],
            output(&["M", "N"]),
            [
                &[&[64, 64, 64], &[128, 64, 32]],
                &[&[4096, 4096, 4096], &[4096, 11008, 4096]],
                &[&[67, 45, 93], &[1, 33, 17]],
            ],
            &[16, 16, 16],
            &[
                "aten::mm",
                "aten::bmm",
                "aten::addmm",
                "aten::matmul",
                "aten::linear",
            ],
            Bound::Compute,
            Formulas {
                flops: |d| 2.0 * d[0] * d[1] * d[2],
                min_bytes: |d, e| (d[0] * d[2] + d[2] * d[1] + d[0] * d[1]) * e,
            },
        )
        .tolerances(dot_products())
        .params(vec![
            // not `bias`: kernel_fn's `bias` keyword is the tensor (as layernorm's)
            ParamSpec::new(
                "has_bias",
                ParamType::Bool,
                json!(false),
                "whether a bias [N] is added to every row, as the epilogue of nn.Linear and \
                 GPT-2's Conv1D (addmm) with their bias; false: no `bias` input, C = A @ B",
            ),
        ])
    }

    fn softmax() -> KindSpec {
        spec(
            "softmax",
            "row-wise softmax over the last dim",
            ROWS_COLS,
            vec![input("x", Data, ROWS_COLS)],
            output(ROWS_COLS),
            [
                ROW_CPU,
                &[&[4096, 4096], &[8192, 8192], &[4096, 50257]],
                ROW_EDGE,
            ],
            &[4, 32],
            &["aten::_softmax", "aten::softmax", "aten::_log_softmax"],
            Bound::Memory,
            Formulas {
                flops: |d| 5.0 * d[0] * d[1],
                min_bytes: |d, e| 2.0 * d[0] * d[1] * e,
            },
        )
        .masked()
    }

    fn layernorm() -> KindSpec {
        spec(
            "layernorm",
            "layer normalisation over the last dim, (x − mean)/sqrt(var + eps) · w (+ b)",
            ROWS_COLS,
            vec![
                input("x", Data, ROWS_COLS),
                input("weight", Weight, &["cols"]),
                InputSpec {
                    only_if: Some("has_bias".into()),
                    ..input("bias", Weight, &["cols"])
                },
            ],
            output(ROWS_COLS),
            [ROW_CPU, &[&[4096, 4096], &[8192, 8192]], ROW_EDGE],
            &[4, 32],
            &["aten::layer_norm", "aten::native_layer_norm"],
            Bound::Memory,
            Formulas {
                flops: |d| 8.0 * d[0] * d[1],
                min_bytes: |d, e| (2.0 * d[0] * d[1] + 2.0 * d[1]) * e,
            },
        )
        .params(layernorm_params())
    }

    /// layernorm's parameters, shared with add_layernorm.
    fn layernorm_params() -> Vec<ParamSpec> {
        vec![
            eps(1e-5, "nn.LayerNorm's default; BERT uses 1e-12"),
            // not `bias`: kernel_fn's `bias` keyword is the tensor
            ParamSpec::new(
                "has_bias",
                ParamType::Bool,
                json!(true),
                "whether a bias is added (nn.LayerNorm(bias=False) has none: no `bias` input then)",
            ),
        ]
    }

    /// The `eps` parameter of a norm: inside the square root, above 0.
    fn eps(default: f64, doc: &str) -> ParamSpec {
        ParamSpec::new(
            "eps",
            ParamType::Float { above: Some(0.0) },
            json!(default),
            &format!("added to the mean square (variance) inside the square root; default {default:e}, {doc}"),
        )
    }

    fn rmsnorm() -> KindSpec {
        spec(
            "rmsnorm",
            "RMS normalisation x / sqrt(mean(x²) + eps) · (w + weight_offset)",
            ROWS_COLS,
            vec![
                input("x", Data, ROWS_COLS),
                input("weight", Weight, &["cols"]),
            ],
            output(ROWS_COLS),
            [ROW_CPU, &[&[4096, 4096], &[8192, 8192]], ROW_EDGE],
            &[4, 32],
            &["aten::rms_norm", "aten::_fused_rms_norm"],
            Bound::Memory,
            Formulas {
                flops: |d| 4.0 * d[0] * d[1],
                min_bytes: |d, e| (2.0 * d[0] * d[1] + d[1]) * e,
            },
        )
        .params(rmsnorm_params())
    }

    /// rmsnorm's parameters, shared with add_rmsnorm.
    fn rmsnorm_params() -> Vec<ParamSpec> {
        vec![
            eps(1e-6, "Llama configs often set 1e-5"),
            ParamSpec::new(
                "weight_offset",
                ParamType::OneOf {
                    values: vec![json!(0), json!(1)],
                },
                json!(0),
                "added to the weight: 1 for Gemma's x̂ · (1 + w) (GemmaRMSNorm), 0 otherwise",
            ),
            ParamSpec::new(
                "cast_order",
                ParamType::OneOf {
                    values: vec![json!("float32"), json!("llama"), json!("t5")],
                },
                json!("float32"),
                "float32: all in float32, cast once at the end (GemmaRMSNorm); llama: x̂ in \
             float32, cast to the input dtype, then times the weight (LlamaRMSNorm); t5: \
             x̂ in float32, cast to the weight's dtype when it is half, then times the \
             weight (T5LayerNorm)",
            ),
        ]
    }

    fn flash_attention() -> KindSpec {
        spec(
            "flash_attention",
            "scaled-dot-product attention softmax(Q·Kᵀ·scale + mask)·V, causal by default, \
             K/V with kv_heads heads (grouped-query), an optional additive key-padding mask",
            BHSD,
            vec![
                input("Q", Data, BHSD),
                // [batch, kv_heads, seq, head_dim]: dims name the shape's dims only, so they
                // read `heads` (the default kv_heads); the generator and the kernel take
                // kv_heads from the parameter and from K's shape
                input("K", Data, BHSD),
                input("V", Data, BHSD),
                InputSpec {
                    only_if: Some("has_mask".into()),
                    ..input("mask", Data, &["batch", "seq"])
                },
            ],
            output(BHSD),
            [
                &[&[1, 2, 32, 16], &[2, 2, 64, 32]],
                &[&[1, 32, 2048, 128]],
                &[&[1, 3, 37, 64]],
            ],
            &[1, 2, 16, 16],
            &[
                "aten::scaled_dot_product_attention",
                "aten::_scaled_dot_product_flash_attention",
                "aten::_scaled_dot_product_efficient_attention",
                "aten::_scaled_dot_product_cudnn_attention",
                "aten::_scaled_dot_product_attention_math",
                "aten::_softmax",
            ],
            Bound::Compute,
            Formulas {
                flops: |d| 2.0 * d[0] * d[1] * d[2] * d[2] * d[3],
                min_bytes: |d, e| 4.0 * d[0] * d[1] * d[2] * d[3] * e,
            },
        )
        .tolerances(dot_products())
        .params(vec![
            ParamSpec::new(
                "causal",
                ParamType::Bool,
                json!(true),
                "query i attends to keys j ≤ i (decoders); false: to every key (BERT)",
            ),
            ParamSpec::new(
                "scale",
                ParamType::Float { above: Some(0.0) },
                Value::Null,
                "multiplies Q·Kᵀ; unset (null): 1/√head_dim, SDPA's default",
            ),
            ParamSpec::new(
                "kv_heads",
                ParamType::Int { min: Some(1) },
                Value::Null,
                "heads of K and V, dividing heads (grouped-query attention: Q head h reads \
                 K/V head h / (heads / kv_heads)); unset (null): heads",
            )
            .dividing("heads"),
            ParamSpec::new(
                "has_mask",
                ParamType::Bool,
                json!(false),
                "whether an additive key-padding mask `mask` [batch, seq] (0 for a kept key, \
                 −inf or a large negative number for a padded one) is added to the scaled \
                 scores; a boolean mask is turned into one by the plug",
            ),
        ])
    }

    fn fused_mlp() -> KindSpec {
        let tih: &[&str] = &["tokens", "hidden", "intermediate"];
        // three matmuls and an intermediate rounded to the dtype: twice the usual bounds
        let doubled = |t: Tolerance| Tolerance {
            atol: t.atol * 2.0,
            rtol: t.rtol * 2.0,
            max_rel_l2: t.max_rel_l2 * 2.0,
        };
        spec(
            "fused_mlp",
            "gated MLP down(act(x·gateᵀ) · (x·upᵀ)): SwiGLU (act SiLU) or GeGLU (tanh GELU)",
            tih,
            vec![
                input("x", Data, &["tokens", "hidden"]),
                input("w_gate", Weight, &["intermediate", "hidden"]),
                input("w_up", Weight, &["intermediate", "hidden"]),
                input("w_down", Weight, &["hidden", "intermediate"]),
            ],
            output(&["tokens", "hidden"]),
            [
                &[&[16, 32, 64], &[32, 64, 96]],
                &[&[2048, 4096, 11008]],
                &[&[13, 40, 72]],
            ],
            &[4, 16, 32],
            &[
                "aten::mm",
                "aten::addmm",
                "aten::matmul",
                "aten::linear",
                "aten::silu",
            ],
            Bound::Compute,
            Formulas {
                flops: |d| 3.0 * 2.0 * d[0] * d[1] * d[2],
                min_bytes: |d, e| (2.0 * d[0] * d[1] + 3.0 * d[1] * d[2]) * e,
            },
        )
        .tolerances(Tolerances {
            float16: doubled(Tolerances::DEFAULT.float16),
            bfloat16: doubled(Tolerances::DEFAULT.bfloat16),
            float32: dot_products().float32,
        })
        .params(vec![ParamSpec::new(
            "activation",
            ParamType::OneOf {
                values: vec![json!("silu"), json!("gelu_tanh")],
            },
            json!("silu"),
            "the gate's activation: silu (SwiGLU: Llama, Mistral, Qwen2) or gelu_tanh, \
             0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))) (GeGLU: transformers' \
             gelu_pytorch_tanh, Gemma)",
        )])
    }

    fn cross_entropy() -> KindSpec {
        let mut k = spec(
            "cross_entropy",
            "mean cross-entropy of logits against class ids",
            &["rows", "vocab"],
            vec![
                input("logits", Data, &["rows", "vocab"]),
                input("targets", Index, &["rows"]),
            ],
            OutputSpec {
                dims: Vec::new(),
                dtype: ElementType::Float32,
            },
            [
                &[&[8, 128], &[16, 500]],
                &[&[4096, 50257], &[4096, 32000]],
                ROW_EDGE,
            ],
            &[4, 32],
            &[
                "aten::cross_entropy_loss",
                "aten::nll_loss",
                "aten::nll_loss_forward",
                "aten::nll_loss_nd",
                "aten::_log_softmax",
                "aten::log_softmax",
            ],
            Bound::Memory,
            // int64 targets (8 bytes each); the output is one float32
            Formulas {
                flops: |d| 5.0 * d[0] * d[1],
                min_bytes: |d, e| d[0] * d[1] * e + d[0] * 8.0 + 4.0,
            },
        );
        k.masked_rows = true;
        k
    }

    fn rotary_embedding() -> KindSpec {
        spec(
            "rotary_embedding",
            "rotary position embedding of one tensor (Q or K): pairs interleaved \
             (x[2i], x[2i+1]) or half-split (x[i], x[i + head_dim/2], HF's rotate_half)",
            BHSD,
            vec![
                input("x", Data, BHSD),
                input("cos", Table, &["seq", "head_dim/2"]),
                input("sin", Table, &["seq", "head_dim/2"]),
            ],
            output(BHSD),
            [
                &[&[1, 2, 16, 32], &[2, 2, 32, 64]],
                &[&[1, 32, 2048, 128]],
                &[&[1, 3, 37, 48]],
            ],
            &[1, 2, 8, 16],
            &[],
            Bound::Memory,
            // cos and sin are [seq, head_dim/2] each
            Formulas {
                flops: |d| 3.0 * d[0] * d[1] * d[2] * d[3],
                min_bytes: |d, e| 2.0 * d[0] * d[1] * d[2] * d[3] * e + d[2] * d[3] * e,
            },
        )
        .params(vec![ParamSpec::new(
            "pairing",
            ParamType::OneOf {
                values: vec![json!("interleaved"), json!("half_split")],
            },
            json!("interleaved"),
            "which lanes of a row are rotated together by the angle of pair i (cos/sin[s, i]): \
             interleaved, (x[2i], x[2i+1]) (RoFormer, the bundled llama example); half_split, \
             (x[i], x[i + head_dim/2]) (HF transformers' rotate_half: Llama, Mistral, Qwen2)",
        )])
    }

    fn reduce() -> KindSpec {
        let mut k = spec(
            "reduce",
            "sum over the last dim",
            ROWS_COLS,
            vec![input("x", Data, ROWS_COLS)],
            output(&["rows"]),
            [ROW_CPU, &[&[8192, 8192], &[4096, 4096]], ROW_EDGE],
            &[4, 32],
            &["aten::sum"],
            Bound::Memory,
            Formulas {
                flops: |d| d[0] * d[1],
                min_bytes: |d, e| (d[0] * d[1] + d[0]) * e,
            },
        );
        k.pluggable = false;
        k
    }

    // The fused residual-add norms (issue 37): `h = x + residual` as the model rounds it,
    // then the norm of h; one output [2, rows, cols] holds h and the norm (one tensor, as
    // every kind returns). Bytes: x and residual read, h and y written, the weights once.
    fn add_rmsnorm() -> KindSpec {
        spec(
            "add_rmsnorm",
            "residual add then RMS normalisation: h = x + residual, y = rmsnorm(h), out = [h, y]",
            ROWS_COLS,
            vec![
                input("x", Data, ROWS_COLS),
                input("residual", Data, ROWS_COLS),
                input("weight", Weight, &["cols"]),
            ],
            output(&["2", "rows", "cols"]),
            [ROW_CPU, &[&[4096, 4096], &[8192, 8192]], ROW_EDGE],
            &[4, 32],
            &["aten::rms_norm", "aten::_fused_rms_norm"],
            Bound::Memory,
            Formulas {
                flops: |d| 5.0 * d[0] * d[1],
                min_bytes: |d, e| (4.0 * d[0] * d[1] + d[1]) * e,
            },
        )
        .params(rmsnorm_params())
    }

    fn add_layernorm() -> KindSpec {
        spec(
            "add_layernorm",
            "residual add then layer normalisation: h = x + residual, y = layernorm(h), out = [h, y]",
            ROWS_COLS,
            vec![
                input("x", Data, ROWS_COLS),
                input("residual", Data, ROWS_COLS),
                input("weight", Weight, &["cols"]),
                InputSpec {
                    only_if: Some("has_bias".into()),
                    ..input("bias", Weight, &["cols"])
                },
            ],
            output(&["2", "rows", "cols"]),
            [ROW_CPU, &[&[4096, 4096], &[8192, 8192]], ROW_EDGE],
            &[4, 32],
            &["aten::layer_norm", "aten::native_layer_norm"],
            Bound::Memory,
            Formulas {
                flops: |d| 9.0 * d[0] * d[1],
                min_bytes: |d, e| (4.0 * d[0] * d[1] + 2.0 * d[1]) * e,
            },
        )
        .params(layernorm_params())
    }

    impl KindSpec {
        fn params(mut self, p: Vec<ParamSpec>) -> KindSpec {
            self.params = p;
            self
        }

        fn tolerances(mut self, t: Tolerances) -> KindSpec {
            self.tolerances = t;
            self
        }

        fn masked(mut self) -> KindSpec {
            self.masked_rows = true;
            self
        }
    }

    /// Every built-in kind, in `KernelKind::ALL` order.
    pub(super) fn all() -> Vec<KindSpec> {
        vec![
            matmul(),
            softmax(),
            layernorm(),
            rmsnorm(),
            flash_attention(),
            fused_mlp(),
            cross_entropy(),
            rotary_embedding(),
            reduce(),
            add_rmsnorm(),
            add_layernorm(),
        ]
    }
}

/// What a kind is, read from its catalogue entry: the kind types (`kernel.rs`) know no
/// catalogue, the catalogue knows them.
impl KernelKind {
    /// The kind's catalogue entry ([`crate::Catalogue::builtin`]): every fact below is
    /// read from it.
    pub fn spec(self) -> &'static KindSpec {
        let spec = &Catalogue::builtin().kinds[self as usize];
        debug_assert_eq!(spec.name, self.name());
        spec
    }

    /// Keyword names of `kernel_fn`'s inputs, in order, optional ones (present only at
    /// some parameters: matmul's `bias`) included; [`KindSpec::inputs_at`] gives those of
    /// given parameters.
    pub fn input_names(self) -> Vec<&'static str> {
        self.spec().input_names()
    }

    /// Names of the dims of this kind's problem shape (see [`Shape`]).
    pub fn dim_names(self) -> Vec<&'static str> {
        self.spec().dim_names.iter().map(String::as_str).collect()
    }

    /// Whether the kind is memory- or compute-bound at its `gpu` shapes (its arithmetic
    /// intensity against an H100/H200-class ridge point of ~200 FLOP/byte).
    pub fn bound(self) -> Bound {
        self.spec().bound
    }

    /// The shapes of the given set (see [`ShapeSet`]).
    ///
    /// `cpu` shapes are small enough for Triton's interpreter on two cores; `gpu` shapes are
    /// the sizes of real models (and of the roofline targets); `edge` shapes are not powers
    /// of two, to catch masking bugs.
    pub fn shapes(self, set: ShapeSet) -> Vec<Shape> {
        self.spec().shapes(set).to_vec()
    }

    /// Dtypes swept by the shape-sweep stage on the given device class.
    ///
    /// Triton's interpreter computes with numpy, which has no bfloat16, so CPU mode sweeps
    /// float32 and float16 only.
    pub fn dtypes(self, on_gpu: bool) -> Vec<DType> {
        self.spec().dtypes(on_gpu).to_vec()
    }

    /// Whether the kind's rows may hold -inf, as attention masks and padded vocabularies
    /// leave them (softmax, cross-entropy): the judge's stability stage then also feeds rows
    /// with -inf columns at either end (the `masked` input mode of `python/catalogue.py`) at
    /// the timing shape, and unless quick at the first shape of the set and the edge shapes.
    pub fn takes_masked_rows(self) -> bool {
        self.spec().masked_rows
    }

    /// Whether `autokernel verify` can plug a kernel of this kind into a model: each such
    /// kind has a standard call site (`nn.Linear` for matmul, `nn.LayerNorm`, RMSNorm
    /// modules, `torch.nn.functional` softmax, scaled_dot_product_attention and
    /// cross_entropy, gated MLP modules, HF's `apply_rotary_pos_emb` and rotary modules
    /// with an `inv_freq`; `python/plugs.py`). Reductions are written inline in models and
    /// have none.
    pub fn pluggable(self) -> bool {
        self.spec().pluggable
    }

    /// Whether PyTorch computes the kind with one vendor-tuned library kernel (matmul:
    /// cuBLAS; flash_attention: SDPA's fused flash and memory-efficient kernels), so that a
    /// plan expects parity with PyTorch at best rather than the roofline: on the H100 the
    /// matmul starter, tuned, reached 0.83–0.89× cuBLAS at OPT-125m's shapes
    /// (docs/benchmarks.md, "Winnable targets").
    pub fn library_reference(self) -> bool {
        matches!(self, KernelKind::Matmul | KernelKind::FlashAttention)
    }

    /// Aten ops a candidate of this kind may dispatch at the top level of a profiled call:
    /// [`ALLOWED_OPS`] and the kind's own [`KindSpec::allowed_ops`].
    pub fn allowed_ops(self) -> Vec<&'static str> {
        self.spec().allowed_ops()
    }

    /// Aten ops a candidate of this kind may not dispatch: computing the result with the
    /// reference's own operation is not a kernel.
    pub fn forbidden_ops(self) -> Vec<&'static str> {
        self.spec()
            .forbidden_ops
            .iter()
            .map(String::as_str)
            .collect()
    }

    /// The comparison tolerance for outputs of this kind in `dtype`.
    ///
    /// Elementwise: `|out − ref| ≤ atol + rtol·|ref|`; and as a whole:
    /// `‖out − ref‖₂ / ‖ref‖₂ ≤ max_rel_l2`, which catches an answer that is elementwise
    /// close only because every true value is tiny (an all-zeros softmax over a long row).
    /// The values are the catalogue's ([`crate::Tolerances::DEFAULT`] and the kinds that
    /// differ).
    pub fn tolerance(self, dtype: DType) -> Tolerance {
        self.spec().tolerance(dtype)
    }

    /// Floating-point operations of one call at `shape` (the catalogue entry's formula;
    /// sources beside the entries in `catalogue.rs`).
    pub fn flops(self, shape: &Shape) -> f64 {
        self.spec().flops(shape)
    }

    /// Minimum DRAM bytes one call must move at `shape`: every input read once and the
    /// output written once (the compulsory traffic of the roofline model).
    ///
    /// # Units
    /// Bytes. Divided by latency it is achieved bandwidth, comparable to
    /// [`crate::GpuSpec::mem_bandwidth_gb_s`] (1 GB = 1e9 B).
    pub fn min_bytes(self, shape: &Shape, dtype: DType) -> f64 {
        self.spec().min_bytes(shape, dtype)
    }

    /// Arithmetic intensity in FLOP per byte at `shape` and `dtype`: [`Self::flops`] over
    /// [`Self::min_bytes`]. Compare with [`crate::GpuSpec::ridge_point`].
    pub fn arithmetic_intensity(self, shape: &Shape, dtype: DType) -> f64 {
        let bytes = self.min_bytes(shape, dtype);
        if bytes > 0.0 {
            self.flops(shape) / bytes
        } else {
            0.0
        }
    }

    /// Throughput of one call that took `latency_us`, in this kind's unit
    /// ([`Bound::throughput_unit`]): GB/s of [`Self::min_bytes`] or TFLOP/s of [`Self::flops`].
    pub fn throughput(self, shape: &Shape, dtype: DType, latency_us: f64) -> f64 {
        self.spec().throughput(shape, dtype, latency_us)
    }
}

impl Shape {
    /// Parses `4096,4096` or `4096x4096` and checks the rank against `kind`.
    ///
    /// # Errors
    /// [`ParseError::Shape`] for anything but positive integers, [`ParseError::Rank`] for
    /// the wrong number of dims.
    pub fn parse_for(kind: KernelKind, text: &str) -> Result<Shape, ParseError> {
        let shape: Shape = text.parse()?;
        let names = kind.dim_names();
        if shape.0.len() != names.len() {
            return Err(ParseError::Rank {
                kind,
                expected: names.len(),
                names: names.join(", "),
                got: shape.0.len(),
            });
        }
        Ok(shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::KernelKind;

    #[test]
    fn the_builtin_catalogue_lists_every_kernel_kind_in_order() {
        let names = Catalogue::builtin().names();
        let want: Vec<&str> = KernelKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names, want);
    }

    #[test]
    fn the_catalogue_round_trips_through_json_with_its_formulas() {
        let c = Catalogue::builtin();
        let back = Catalogue::from_json(&c.to_json()).unwrap();
        assert_eq!(&back, c);
        let s = Shape(vec![64, 64, 64]);
        assert_eq!(back.get("matmul").unwrap().flops(&s), 2.0 * 64f64.powi(3));
    }

    #[test]
    fn no_kind_allows_an_op_it_forbids_and_a_kinds_own_allowed_ops_come_after_the_common_ones() {
        for kind in KernelKind::ALL {
            let allowed = kind.allowed_ops();
            assert_eq!(
                allowed,
                ALLOWED_OPS,
                "{}: the built-ins add none",
                kind.name()
            );
            for op in kind.forbidden_ops() {
                assert!(
                    !allowed.contains(&op),
                    "{} allows {op}, which it forbids",
                    kind.name()
                );
            }
        }
        // a kind read from JSON may add its own, after the common list
        let mut spec = KernelKind::Reduce.spec().clone();
        spec.allowed_ops = vec!["aten::arange".into()];
        let allowed = spec.allowed_ops();
        assert_eq!(allowed.len(), ALLOWED_OPS.len() + 1);
        assert_eq!(allowed.last(), Some(&"aten::arange"));
        // and JSON written before the field existed reads as no extra ops
        let mut json: serde_json::Value = serde_json::to_value(KernelKind::Reduce.spec()).unwrap();
        json.as_object_mut().unwrap().remove("allowed_ops");
        let old: KindSpec = serde_json::from_value(json).unwrap();
        assert!(old.allowed_ops.is_empty());
    }

    #[test]
    fn a_kind_listed_twice_is_refused_by_name() {
        let c = Catalogue::builtin().clone();
        let mut twice = c.clone();
        twice.kinds.push(c.kinds[1].clone());
        let err = Catalogue::from_json(&twice.to_json()).unwrap_err();
        assert!(err.contains("`softmax`"), "{err}");
    }

    #[test]
    fn a_kind_not_built_in_has_no_formulas_and_reads_zero_throughput() {
        let mut toy = Catalogue::builtin().get("softmax").unwrap().clone();
        toy.name = "toy".into();
        let c = Catalogue::builtin().clone().with(toy);
        let back = Catalogue::from_json(&c.to_json()).unwrap();
        let toy = back.get("toy").unwrap();
        assert!(toy.formulas.is_none());
        assert_eq!(
            toy.throughput(&Shape(vec![8, 128]), DType::Float16, 1.0),
            0.0
        );
    }

    #[test]
    fn every_input_and_output_dim_names_a_dim_of_its_kind() {
        for k in &Catalogue::builtin().kinds {
            let tiny = &k.tiny_shape;
            for i in &k.inputs {
                eval_dims(&i.dims, &k.dim_names, tiny)
                    .unwrap_or_else(|e| panic!("{}: {e}", k.name));
            }
            k.output_for(tiny, DType::Float16)
                .unwrap_or_else(|e| panic!("{}: {e}", k.name));
        }
    }

    #[test]
    fn dim_expressions_divide_and_name_what_is_wrong() {
        let names = vec!["seq".to_string(), "head_dim".to_string()];
        let shape = Shape(vec![8, 16]);
        let dims = eval_dims(&["seq".into(), "head_dim/2".into()], &names, &shape).unwrap();
        assert_eq!(dims, vec![8, 8]);
        let err = eval_dims(&["cols".into()], &names, &shape).unwrap_err();
        assert!(err.contains("`cols`"), "{err}");
        assert!(eval_dims(&["seq/0".into()], &names, &shape).is_err());
        let stacked = eval_dims(&["2".into(), "seq".into()], &names, &shape).unwrap();
        assert_eq!(stacked, vec![2, 8]);
        assert!(eval_dims(&["0".into()], &names, &shape).is_err());
        assert!(eval_dims(&["seq".into()], &names, &Shape(vec![8])).is_err());
    }

    #[test]
    fn tolerances_differ_only_where_the_entries_say() {
        let t = |k: KernelKind, d| KernelKind::tolerance(k, d);
        let tol = |atol, rtol, max_rel_l2| Tolerance {
            atol,
            rtol,
            max_rel_l2,
        };
        assert_eq!(
            t(KernelKind::Softmax, DType::Float16),
            tol(1e-2, 1e-2, 5e-3)
        );
        assert_eq!(t(KernelKind::Reduce, DType::Float32), tol(1e-4, 1e-4, 1e-4));
        // long dot products in float32, and fused_mlp's doubled half-precision bounds
        assert_eq!(t(KernelKind::Matmul, DType::Float32), tol(1e-3, 1e-3, 1e-4));
        assert_eq!(
            t(KernelKind::FusedMlp, DType::Float32),
            tol(1e-3, 1e-3, 1e-4)
        );
        assert_eq!(
            t(KernelKind::FusedMlp, DType::Float16),
            tol(2e-2, 2e-2, 1e-2)
        );
        assert_eq!(
            t(KernelKind::FusedMlp, DType::Bfloat16),
            tol(4e-2, 4e-2, 4e-2)
        );
        assert_eq!(t(KernelKind::Matmul, DType::Float16), tol(1e-2, 1e-2, 5e-3));
    }

    #[test]
    fn cross_entropy_returns_a_float32_scalar_and_reduce_one_value_per_row() {
        let c = Catalogue::builtin();
        let (dims, dt) = c
            .get("cross_entropy")
            .unwrap()
            .output_for(&Shape(vec![8, 128]), DType::Float16)
            .unwrap();
        assert_eq!((dims, dt.as_str()), (vec![], "float32"));
        let (dims, dt) = c
            .get("reduce")
            .unwrap()
            .output_for(&Shape(vec![8, 128]), DType::Bfloat16)
            .unwrap();
        assert_eq!((dims, dt.as_str()), (vec![8], "bfloat16"));
    }

    #[test]
    fn optional_inputs_are_present_only_where_their_parameter_is_true() {
        let names = |kind: KernelKind, params: &[(&str, Value)]| -> Vec<String> {
            let params: Params = params
                .iter()
                .map(|(k, v)| (k.to_string(), v.clone()))
                .collect();
            kind.spec()
                .inputs_at(&params)
                .iter()
                .map(|i| i.name.clone())
                .collect()
        };
        assert_eq!(names(KernelKind::Matmul, &[]), ["A", "B"]);
        assert_eq!(
            names(KernelKind::Matmul, &[("has_bias", Value::Bool(true))]),
            ["A", "B", "bias"]
        );
        // layernorm's bias defaults to present
        assert_eq!(names(KernelKind::Layernorm, &[]), ["x", "weight", "bias"]);
        assert_eq!(
            names(KernelKind::Layernorm, &[("has_bias", Value::Bool(false))]),
            ["x", "weight"]
        );
        assert_eq!(
            names(
                KernelKind::FlashAttention,
                &[("has_mask", Value::Bool(true))]
            ),
            ["Q", "K", "V", "mask"]
        );
        let defaults: Vec<&str> = KernelKind::Matmul
            .spec()
            .default_inputs()
            .iter()
            .map(|i| i.name.as_str())
            .collect();
        assert_eq!(defaults, ["A", "B"]);
    }
}
