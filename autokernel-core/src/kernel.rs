//! Kernel kinds, dtypes and shapes. Each kind's facts (inputs, shape sets, tolerances,
//! forbidden reference ops, FLOP and byte formulas) live in its catalogue entry
//! ([`crate::Catalogue`]); [`KernelKind`]'s methods that read it are defined there.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// The kinds of kernel autokernel knows how to judge and optimise, by the field's names.
///
/// Parsed from and printed as the snake-case name (`flash_attention`, `rotary_embedding`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KernelKind {
    /// `C = A @ B`; shape `[M, N, K]`, `A` is `[M, K]`, `B` is `[K, N]`.
    Matmul,
    /// Row-wise softmax over the last dim; shape `[rows, cols]`.
    Softmax,
    /// Layer normalisation over the last dim (eps 1e-5, affine); shape `[rows, cols]`.
    Layernorm,
    /// RMS normalisation `x / sqrt(mean(x²) + 1e-6) · w`; shape `[rows, cols]`.
    Rmsnorm,
    /// Causal scaled-dot-product attention, scale `1/√d`; shape `[batch, heads, seq, head_dim]`.
    FlashAttention,
    /// Gated MLP `down(act(x·gateᵀ) · (x·upᵀ))`, act SiLU (SwiGLU) or the tanh GELU (GeGLU,
    /// the `activation` param); shape `[tokens, hidden, intermediate]`.
    FusedMlp,
    /// Mean cross-entropy of logits against class ids; shape `[rows, vocab]`.
    CrossEntropy,
    /// Rotary position embedding of one tensor, pairs interleaved or half-split (the
    /// `pairing` param); shape `[batch, heads, seq, head_dim]`.
    RotaryEmbedding,
    /// Sum over the last dim; shape `[rows, cols]`.
    Reduce,
    /// A residual add then RMS normalisation, `h = x + residual; y = rmsnorm(h)`, both
    /// returned as one `[2, rows, cols]` tensor (`h`, then `y`); shape `[rows, cols]`.
    AddRmsnorm,
    /// A residual add then layer normalisation, `h = x + residual; y = layernorm(h)`, both
    /// returned as one `[2, rows, cols]` tensor (`h`, then `y`); shape `[rows, cols]`.
    AddLayernorm,
}

/// Whether a kind's speed is limited by DRAM bandwidth or by arithmetic throughput at the
/// shapes that matter, which decides the unit of its throughput (GB/s or TFLOP/s).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Bound {
    /// Limited by memory bandwidth; throughput in GB/s.
    Memory,
    /// Limited by tensor-core throughput; throughput in TFLOP/s.
    Compute,
}

impl Bound {
    /// The unit its throughput is reported in: `GB/s` or `TFLOP/s`.
    pub fn throughput_unit(self) -> &'static str {
        match self {
            Bound::Memory => "GB/s",
            Bound::Compute => "TFLOP/s",
        }
    }
}

/// Element types of kernel inputs and outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// IEEE half precision, 2 bytes.
    Float16,
    /// bfloat16, 2 bytes.
    Bfloat16,
    /// IEEE single precision, 4 bytes.
    Float32,
}

impl DType {
    /// All dtypes, in the order they are swept.
    pub const ALL: [DType; 3] = [DType::Float16, DType::Bfloat16, DType::Float32];

    /// Bytes per element.
    pub fn size_bytes(self) -> u64 {
        match self {
            DType::Float16 | DType::Bfloat16 => 2,
            DType::Float32 => 4,
        }
    }

    /// The name PyTorch uses (`float16`, `bfloat16`, `float32`).
    pub fn name(self) -> &'static str {
        match self {
            DType::Float16 => "float16",
            DType::Bfloat16 => "bfloat16",
            DType::Float32 => "float32",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for DType {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "float16" | "fp16" | "half" => Ok(DType::Float16),
            "bfloat16" | "bf16" => Ok(DType::Bfloat16),
            "float32" | "fp32" | "float" => Ok(DType::Float32),
            _ => Err(ParseError::DType(s.to_string())),
        }
    }
}

/// A value that could not be parsed; the message lists what is accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// Not one of the kernel kinds.
    #[error("unknown kernel kind `{0}`; expected one of: matmul, softmax, layernorm, rmsnorm, flash_attention, fused_mlp, cross_entropy, rotary_embedding, reduce")]
    Kind(String),
    /// Not one of the three dtypes.
    #[error("unknown dtype `{0}`; expected float16, bfloat16 or float32")]
    DType(String),
    /// Not a comma-separated list of positive integers.
    #[error("invalid shape `{0}`; expected positive integers separated by commas or `x`, e.g. `4096,4096`")]
    Shape(String),
    /// A shape with the wrong number of dims for its kind.
    #[error("a {kind} shape has {expected} dims ({names}), got {got}")]
    Rank {
        /// The kind the shape was for.
        kind: KernelKind,
        /// Dims the kind needs.
        expected: usize,
        /// Names of those dims.
        names: String,
        /// Dims given.
        got: usize,
    },
}

impl KernelKind {
    /// Every kind, in catalogue order.
    pub const ALL: [KernelKind; 11] = [
        KernelKind::Matmul,
        KernelKind::Softmax,
        KernelKind::Layernorm,
        KernelKind::Rmsnorm,
        KernelKind::FlashAttention,
        KernelKind::FusedMlp,
        KernelKind::CrossEntropy,
        KernelKind::RotaryEmbedding,
        KernelKind::Reduce,
        KernelKind::AddRmsnorm,
        KernelKind::AddLayernorm,
    ];

    /// The snake-case name used on the command line, in `kernel.py` and in `results.tsv`.
    pub fn name(self) -> &'static str {
        match self {
            KernelKind::Matmul => "matmul",
            KernelKind::Softmax => "softmax",
            KernelKind::Layernorm => "layernorm",
            KernelKind::Rmsnorm => "rmsnorm",
            KernelKind::FlashAttention => "flash_attention",
            KernelKind::FusedMlp => "fused_mlp",
            KernelKind::CrossEntropy => "cross_entropy",
            KernelKind::RotaryEmbedding => "rotary_embedding",
            KernelKind::Reduce => "reduce",
            KernelKind::AddRmsnorm => "add_rmsnorm",
            KernelKind::AddLayernorm => "add_layernorm",
        }
    }
}

impl fmt::Display for KernelKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KernelKind {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let wanted = s.trim().to_ascii_lowercase().replace('-', "_");
        KernelKind::ALL
            .into_iter()
            .find(|k| k.name() == wanted)
            .ok_or_else(|| ParseError::Kind(s.to_string()))
    }
}

/// Which of a kind's shape sets to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ShapeSet {
    /// Small shapes for Triton's interpreter on the CPU.
    Cpu,
    /// Real-model sizes for the GPU.
    Gpu,
    /// Sizes that are not powers of two.
    Edge,
}

/// Elementwise and whole-tensor tolerance of an output comparison (see
/// [`KernelKind::tolerance`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Tolerance {
    /// Absolute tolerance per element.
    pub atol: f64,
    /// Relative tolerance per element, times `|reference|`.
    pub rtol: f64,
    /// Largest allowed `‖out − ref‖₂ / ‖ref‖₂`.
    pub max_rel_l2: f64,
}

/// A kernel's problem shape: the dims named by [`KernelKind::dim_names`], e.g. `[M, N, K]`
/// for matmul or `[rows, cols]` for softmax. Not the shape of any single tensor.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Shape(pub Vec<u64>);

impl FromStr for Shape {
    type Err = ParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let dims: Result<Vec<u64>, _> = s
            .split([',', 'x', '×'])
            .map(|p| p.trim().parse::<u64>())
            .collect();
        match dims {
            Ok(d) if !d.is_empty() && d.iter().all(|&v| v > 0) => Ok(Shape(d)),
            _ => Err(ParseError::Shape(s.to_string())),
        }
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("x"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_names() {
        for k in KernelKind::ALL {
            assert_eq!(k.name().parse::<KernelKind>().unwrap(), k);
            assert_eq!(k.to_string(), k.name());
        }
        assert!("conv2d".parse::<KernelKind>().is_err());
    }

    #[test]
    fn every_shape_has_the_rank_of_its_kind() {
        for k in KernelKind::ALL {
            for set in [ShapeSet::Cpu, ShapeSet::Gpu, ShapeSet::Edge] {
                let shapes = k.shapes(set);
                assert!(!shapes.is_empty(), "{k} {set:?}");
                for s in shapes {
                    assert_eq!(s.0.len(), k.dim_names().len(), "{k} {s}");
                }
            }
        }
    }

    #[test]
    fn edge_shapes_are_not_powers_of_two() {
        for k in KernelKind::ALL {
            for s in k.shapes(ShapeSet::Edge) {
                assert!(s.0.iter().any(|d| !d.is_power_of_two()), "{k} {s}");
            }
        }
    }

    #[test]
    fn matmul_flops_and_bytes_match_hand_values() {
        let s = Shape(vec![4096, 4096, 4096]);
        assert_eq!(KernelKind::Matmul.flops(&s), 2.0 * 4096f64.powi(3));
        // three 4096² fp16 matrices = 3 · 16 Mi elements · 2 B = 100663296 B
        assert_eq!(
            KernelKind::Matmul.min_bytes(&s, DType::Float16),
            100_663_296.0
        );
        // 137.4 GFLOP in 200 us is 687.2 TFLOP/s
        let t = KernelKind::Matmul.throughput(&s, DType::Float16, 200.0);
        assert!((t - 687.194_767_36).abs() < 1e-6, "{t}");
    }

    #[test]
    fn softmax_bandwidth_matches_hand_value() {
        // 4096x4096 fp16 read + write = 67108864 B; in 20 us → 3355.44 GB/s
        let s = Shape(vec![4096, 4096]);
        let t = KernelKind::Softmax.throughput(&s, DType::Float16, 20.0);
        assert!((t - 3_355.443_2).abs() < 1e-3, "{t}");
    }

    #[test]
    fn shapes_parse_with_commas_or_x_and_check_rank() {
        assert_eq!(
            "4096,4096".parse::<Shape>().unwrap(),
            Shape(vec![4096, 4096])
        );
        assert_eq!("2x3x4".parse::<Shape>().unwrap(), Shape(vec![2, 3, 4]));
        assert!("4096,".parse::<Shape>().is_err());
        assert!("0,4".parse::<Shape>().is_err());
        let err = Shape::parse_for(KernelKind::Matmul, "4,4").unwrap_err();
        assert!(err.to_string().contains("M, N, K"), "{err}");
    }

    #[test]
    fn dtype_names_parse() {
        assert_eq!("fp16".parse::<DType>().unwrap(), DType::Float16);
        assert_eq!("bfloat16".parse::<DType>().unwrap(), DType::Bfloat16);
        assert!("int8".parse::<DType>().is_err());
    }
}
