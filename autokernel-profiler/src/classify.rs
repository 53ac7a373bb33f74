//! Classification of op groups into [`KernelKind`]s, conversion of recorded input shapes
//! into each kind's problem [`Shape`], and the memory/compute bound on a given GPU.

use autokernel_core::{Bound, DType, GpuSpec, KernelKind, Layout, Shape};

/// The bare op name: lower-case, namespace (`aten::`) and leading underscores removed.
fn bare(name: &str) -> String {
    let last = name.rsplit("::").next().unwrap_or(name);
    last.trim_start_matches('_').to_ascii_lowercase()
}

/// The kind an op or module name maps to, when it alone decides.
///
/// Ops by their aten names (`aten::linear`, `addmm`, `mm`, `bmm`, `matmul` → matmul;
/// `scaled_dot_product_attention` and its backends, `flash*` → flash_attention;
/// `layer_norm` → layernorm; `rms_norm` → rmsnorm; `softmax`/`log_softmax` → softmax;
/// `cross_entropy_loss`/`nll_loss*` → cross_entropy; `sum`/`mean` → reduce); modules by
/// their class names (`Linear`/`Conv1D` → matmul, `*LayerNorm` → layernorm, `*RMSNorm` →
/// rmsnorm, `*Rotary*`/`*RoPE*` → rotary_embedding, `*Attention` with SDPA inside is decided
/// by the op). Fused MLPs need more context and are decided by [`classify_group`].
pub fn kind_of_op(name: &str) -> Option<KernelKind> {
    let b = bare(name);
    let b = b.as_str();
    let lower = name.to_ascii_lowercase();
    if b.starts_with("scaled_dot_product")
        || b.starts_with("flash_attention")
        || b.starts_with("efficient_attention")
        || b.starts_with("flash_attn")
        || b == "sdpa"
    {
        return Some(KernelKind::FlashAttention);
    }
    if b.starts_with("cross_entropy") || b.starts_with("nll_loss") || b == "crossentropyloss" {
        return Some(KernelKind::CrossEntropy);
    }
    if lower.contains("rmsnorm") || b.starts_with("rms_norm") || b.starts_with("fused_rms_norm") {
        return Some(KernelKind::Rmsnorm);
    }
    if lower.contains("layernorm") || b.starts_with("layer_norm") || b == "native_layer_norm" {
        return Some(KernelKind::Layernorm);
    }
    if lower.contains("rotary") || lower.contains("rope") {
        return Some(KernelKind::RotaryEmbedding);
    }
    if matches!(b, "softmax" | "log_softmax" | "safe_softmax") {
        return Some(KernelKind::Softmax);
    }
    if matches!(
        b,
        "linear" | "addmm" | "mm" | "bmm" | "matmul" | "baddbmm" | "addmm_activation" | "conv1d"
    ) {
        return Some(KernelKind::Matmul);
    }
    if matches!(b, "sum" | "mean") {
        return Some(KernelKind::Reduce);
    }
    None
}

/// The kind a kernel's name suggests (`gemm`, `xmma`, `cutlass`, `nvjet`, `sm90_`… →
/// matmul; `flash`/`fmha` → flash_attention; `softmax`; `layer_norm`; `rms_norm`; …).
pub fn kind_of_kernel(name: &str) -> Option<KernelKind> {
    let n = name.to_ascii_lowercase();
    let has = |p: &str| n.contains(p);
    if has("flash") || has("fmha") || has("attention") {
        Some(KernelKind::FlashAttention)
    } else if has("cross_entropy") || has("nll_loss") {
        Some(KernelKind::CrossEntropy)
    } else if has("layer_norm") || has("layernorm") {
        Some(KernelKind::Layernorm)
    } else if has("rms_norm") || has("rmsnorm") {
        Some(KernelKind::Rmsnorm)
    } else if has("softmax") {
        Some(KernelKind::Softmax)
    } else if has("rotary") || has("rope_") {
        Some(KernelKind::RotaryEmbedding)
    } else if has("gemm")
        || has("xmma")
        || has("cutlass")
        || has("nvjet")
        || has("sm90_")
        || has("sm80_")
        || has("matmul")
        || has("gemv")
    {
        Some(KernelKind::Matmul)
    } else {
        None
    }
}

/// Why an op or module that computes with the kinds' ops (a matmul, a softmax) is none of
/// them, for the ops the profile reports as having no kind: a grouped matmul (`_grouped_mm`,
/// a mixture of experts' expert weights in one call; its CPU fallback runs `mm`s inside)
/// and a mixture of experts' router module (`*Router`: a linear, a softmax over the experts
/// and a top-k; its input is the hidden state, not the softmax's rows). `None` for others.
pub fn no_kind_reason(name: &str) -> Option<&'static str> {
    let b = bare(name);
    if matches!(b.as_str(), "grouped_mm" | "scaled_grouped_mm") {
        return Some("grouped matmul (a mixture of experts' experts in one call): no kind for it");
    }
    let module = name
        .strip_prefix(crate::import::MODULE_PREFIX)
        .unwrap_or(name);
    if !name.contains("::") && module.to_ascii_lowercase().contains("router") {
        return Some(
            "a mixture of experts' router (a linear, a softmax over the experts, a top-k): no kind for it",
        );
    }
    None
}

fn is_mlp_module(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    n.contains("mlp") || n.contains("swiglu") || n.contains("feedforward") || n.ends_with("ffn")
}

/// Classifies one op group: the group's own op first, then the ops and modules seen
/// under it (most specific kind first), then its kernels' names; `None` is `other`.
///
/// A module named like an MLP (`*MLP`, `SwiGLU`, `FeedForward`, `*FFN`) with a `silu` among
/// its ops or kernels is a fused MLP.
pub fn classify_group<'a>(
    op: &str,
    chain_ops: impl IntoIterator<Item = &'a str> + Clone,
    kernels: impl IntoIterator<Item = &'a str> + Clone,
) -> Option<KernelKind> {
    if no_kind_reason(op).is_some() {
        return None;
    }
    if is_mlp_module(op)
        && chain_ops
            .clone()
            .into_iter()
            .chain(kernels.clone())
            .any(|n| n.to_ascii_lowercase().contains("silu"))
    {
        return Some(KernelKind::FusedMlp);
    }
    if let Some(k) = kind_of_op(op) {
        return Some(k);
    }
    // a module running a grouped matmul (a mixture of experts' experts) is none of the
    // kinds, whatever its kernels are named (cuBLAS and CUTLASS name them gemm)
    if chain_ops
        .clone()
        .into_iter()
        .any(|o| matches!(bare(o).as_str(), "grouped_mm" | "scaled_grouped_mm"))
    {
        return None;
    }
    const PRIORITY: [KernelKind; 9] = [
        KernelKind::FlashAttention,
        KernelKind::CrossEntropy,
        KernelKind::FusedMlp,
        KernelKind::Layernorm,
        KernelKind::Rmsnorm,
        KernelKind::RotaryEmbedding,
        KernelKind::Softmax,
        KernelKind::Matmul,
        KernelKind::Reduce,
    ];
    let best = |kinds: Vec<KernelKind>| PRIORITY.into_iter().find(|p| kinds.contains(p));
    let from_ops: Vec<KernelKind> = chain_ops.into_iter().filter_map(kind_of_op).collect();
    if let Some(k) = best(from_ops) {
        return Some(k);
    }
    best(kernels.into_iter().filter_map(kind_of_kernel).collect())
}

fn positive(v: &[i64]) -> Option<Vec<u64>> {
    if v.is_empty() || v.iter().any(|&d| d <= 0) {
        return None;
    }
    Some(v.iter().map(|&d| d as u64).collect())
}

/// `[prod(leading dims), last dim]` of a tensor shape.
fn rows_cols(x: &[u64]) -> Option<Shape> {
    let (&cols, lead) = x.split_last()?;
    Some(Shape(vec![lead.iter().product::<u64>().max(1), cols]))
}

/// How the model lays out the op's inputs ([`Layout`]): `B` transposed for a matmul that
/// comes from `nn.Linear` / `aten::linear` (weight recorded as [N, K], used as its
/// transpose); contiguous otherwise, including `addmm` and `mm`, whose recorded shapes do
/// not say whether `B` is a transposed view (Hugging Face's `Conv1D` passes a contiguous
/// [K, N] weight to `addmm`).
pub fn problem_layout(kind: KernelKind, op: &str, shapes: &[Vec<i64>]) -> Layout {
    if kind != KernelKind::Matmul || bare(op) != "linear" {
        return Layout::Contiguous;
    }
    let dims = |i: usize| shapes.get(i).and_then(|s| positive(s));
    match (dims(0), dims(1)) {
        (Some(a), Some(w)) if w.len() == 2 && a.last() == Some(&w[1]) => Layout::BTransposed,
        _ => Layout::Contiguous,
    }
}

/// Converts an op's recorded input shapes (`Input Dims`) into `kind`'s problem shape
/// ([`KernelKind::dim_names`]).
///
/// # Shapes
/// - matmul: `linear` input `[.., K]` and weight `[N, K]` → `[M = prod(leading), N, K]`;
///   `addmm` (bias, `[M, K]`, `[K, N]`) and `mm`/`matmul` (`[.., K]`, `[K, N]`) likewise.
///   Batched `bmm` has no single-matmul shape and gives `None`.
/// - layernorm, rmsnorm, softmax, reduce, cross_entropy: the first input `[.., cols]` →
///   `[rows = prod(leading), cols]`.
/// - flash_attention, rotary_embedding: the first input `[b, h, s, d]` as is (`[bh, s, d]`
///   → `[1, bh, s, d]`).
/// - fused_mlp: input `[.., H]` and the first weight `[I, H]` → `[tokens, H, I]`.
///
/// `None` when the shapes are missing or do not fit.
pub fn problem_shape(kind: KernelKind, op: &str, shapes: &[Vec<i64>]) -> Option<Shape> {
    let inputs: Vec<Option<Vec<u64>>> = shapes.iter().map(|s| positive(s)).collect();
    let first = || inputs.first().cloned().flatten();
    match kind {
        KernelKind::Matmul => {
            let b = bare(op);
            if b == "bmm" || b == "baddbmm" {
                return None;
            }
            let (a, w) = if b == "addmm" || b == "addmm_activation" {
                (inputs.get(1)?.clone()?, inputs.get(2)?.clone()?)
            } else {
                (inputs.first()?.clone()?, inputs.get(1)?.clone()?)
            };
            if a.len() < 2 || w.len() != 2 {
                return None;
            }
            let k = *a.last()?;
            let m: u64 = a[..a.len() - 1].iter().product();
            let linear_style = b.contains("linear") || b == "conv1d";
            let n = if linear_style && w[1] == k {
                w[0]
            } else if w[0] == k {
                w[1]
            } else if w[1] == k {
                w[0]
            } else {
                return None;
            };
            Some(Shape(vec![m, n, k]))
        }
        KernelKind::Layernorm
        | KernelKind::Rmsnorm
        | KernelKind::AddLayernorm
        | KernelKind::AddRmsnorm
        | KernelKind::Softmax
        | KernelKind::Reduce
        | KernelKind::CrossEntropy => rows_cols(&first()?),
        KernelKind::FlashAttention | KernelKind::RotaryEmbedding => {
            let q = first()?;
            match q.len() {
                4 => Some(Shape(q)),
                3 => Some(Shape(vec![1, q[0], q[1], q[2]])),
                _ => None,
            }
        }
        KernelKind::FusedMlp => {
            let x = first()?;
            let w = inputs.get(1).cloned().flatten()?;
            let h = *x.last()?;
            if w.len() != 2 || w[1] != h {
                return None;
            }
            let t: u64 = x[..x.len() - 1].iter().product::<u64>().max(1);
            Some(Shape(vec![t, h, w[0]]))
        }
    }
}

/// Whether `kind` at `shape` and `dtype` is memory- or compute-bound on `gpu`: its
/// arithmetic intensity ([`KernelKind::arithmetic_intensity`]) against the GPU's ridge point
/// ([`GpuSpec::ridge_point`]). Without a GPU or a shape, the kind's usual bound
/// ([`KernelKind::bound`]).
pub fn bound(
    kind: KernelKind,
    shape: Option<&Shape>,
    dtype: DType,
    gpu: Option<&GpuSpec>,
) -> Bound {
    match (shape, gpu) {
        (Some(s), Some(g)) => {
            if kind.arithmetic_intensity(s, dtype) >= g.ridge_point(dtype) {
                Bound::Compute
            } else {
                Bound::Memory
            }
        }
        _ => kind.bound(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use autokernel_core::lookup_gpu;

    #[test]
    fn ops_map_to_kinds_by_their_aten_names() {
        assert_eq!(kind_of_op("aten::addmm"), Some(KernelKind::Matmul));
        assert_eq!(kind_of_op("aten::linear"), Some(KernelKind::Matmul));
        assert_eq!(
            kind_of_op("aten::_scaled_dot_product_flash_attention"),
            Some(KernelKind::FlashAttention)
        );
        assert_eq!(
            kind_of_op("aten::native_layer_norm"),
            Some(KernelKind::Layernorm)
        );
        assert_eq!(kind_of_op("aten::_softmax"), Some(KernelKind::Softmax));
        assert_eq!(
            kind_of_op("aten::nll_loss_nd"),
            Some(KernelKind::CrossEntropy)
        );
        assert_eq!(kind_of_op("aten::mean"), Some(KernelKind::Reduce));
        assert_eq!(kind_of_op("LlamaRMSNorm"), Some(KernelKind::Rmsnorm));
        assert_eq!(kind_of_op("aten::relu"), None);
        assert_eq!(kind_of_op("aten::clamp_min"), None);
        assert_eq!(kind_of_op("aten::summary"), None);
    }

    #[test]
    fn kernel_names_decide_only_second() {
        assert_eq!(
            kind_of_kernel("sm80_xmma_gemm_f32f32_f32f32_f32_nn_n_tilesize32x32x8"),
            Some(KernelKind::Matmul)
        );
        assert_eq!(
            kind_of_kernel("nvjet_hsh_128x256_64x4_2x1_v_bz_coopB_TNN"),
            Some(KernelKind::Matmul)
        );
        assert_eq!(
            kind_of_kernel("pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits>"),
            Some(KernelKind::FlashAttention)
        );
        assert_eq!(
            kind_of_kernel("void at::native::vectorized_elementwise_kernel<4>"),
            None
        );
        // the op decides over the kernel name
        assert_eq!(
            classify_group("aten::relu", ["aten::clamp_min"], ["gemm_like_name"]),
            Some(KernelKind::Matmul)
        );
        assert_eq!(
            classify_group("aten::layer_norm", ["aten::native_layer_norm"], ["gemm"]),
            Some(KernelKind::Layernorm)
        );
    }

    /// A mixture of experts' grouped matmul and router compute with a matmul and a softmax
    /// inside, yet are neither: no kind, with the reason (Mixtral's `_grouped_mm` was planned
    /// as a matmul of unknown shape, its router as a softmax over the hidden size).
    #[test]
    fn grouped_matmuls_and_moe_routers_have_no_kind_whatever_runs_inside() {
        assert_eq!(
            classify_group(
                "aten::_grouped_mm",
                ["aten::mm", "aten::_grouped_mm"],
                ["gemm"]
            ),
            None
        );
        assert_eq!(
            classify_group(
                "nn.Module: MixtralTopKRouter",
                ["aten::linear", "aten::softmax", "aten::topk"],
                ["k"]
            ),
            None
        );
        // a module around one, on a GPU, whose kernels are named gemm
        assert_eq!(
            classify_group(
                "nn.Module: MixtralExperts",
                ["aten::_grouped_mm", "aten::index"],
                ["cutlass_grouped_gemm_kernel"]
            ),
            None
        );
        assert!(
            no_kind_reason("aten::_grouped_mm").is_some_and(|r| r.starts_with("grouped matmul"))
        );
        assert!(no_kind_reason("MixtralTopKRouter").is_some_and(|r| r.contains("router")));
        // the kinds' own ops and modules keep theirs
        for op in [
            "aten::mm",
            "aten::softmax",
            "LlamaRMSNorm",
            "nn.Module: Linear",
        ] {
            assert_eq!(no_kind_reason(op), None, "{op}");
        }
    }

    #[test]
    fn an_mlp_module_with_silu_is_a_fused_mlp() {
        assert_eq!(
            classify_group(
                "LlamaMLP",
                ["aten::linear", "aten::silu", "aten::mul"],
                ["k"]
            ),
            Some(KernelKind::FusedMlp)
        );
        // without silu it is whatever its ops say
        assert_eq!(
            classify_group("GPT2MLP", ["aten::addmm", "aten::gelu"], ["k"]),
            Some(KernelKind::Matmul)
        );
    }

    #[test]
    fn linear_shapes_become_m_n_k() {
        // x [2, 512, 768] @ W[3072, 768]ᵀ → M = 1024, N = 3072, K = 768
        let s = problem_shape(
            KernelKind::Matmul,
            "Linear",
            &[vec![2, 512, 768], vec![3072, 768], vec![3072]],
        );
        assert_eq!(s, Some(Shape(vec![1024, 3072, 768])));
        // addmm(bias, [M,K], [K,N])
        let s = problem_shape(
            KernelKind::Matmul,
            "aten::addmm",
            &[vec![2304], vec![1024, 768], vec![768, 2304]],
        );
        assert_eq!(s, Some(Shape(vec![1024, 2304, 768])));
        let s = problem_shape(
            KernelKind::Matmul,
            "aten::mm",
            &[vec![256, 128], vec![128, 64]],
        );
        assert_eq!(s, Some(Shape(vec![256, 64, 128])));
        assert_eq!(
            problem_shape(
                KernelKind::Matmul,
                "aten::bmm",
                &[vec![4, 8, 8], vec![4, 8, 8]]
            ),
            None
        );
    }

    #[test]
    fn row_kinds_flatten_leading_dims() {
        assert_eq!(
            problem_shape(KernelKind::Rmsnorm, "RMSNorm", &[vec![1, 32, 64], vec![]]),
            Some(Shape(vec![32, 64]))
        );
        assert_eq!(
            problem_shape(
                KernelKind::Softmax,
                "aten::softmax",
                &[vec![8, 12, 512, 512]]
            ),
            Some(Shape(vec![8 * 12 * 512, 512]))
        );
        assert_eq!(
            problem_shape(
                KernelKind::FlashAttention,
                "aten::scaled_dot_product_attention",
                &[
                    vec![1, 12, 1024, 64],
                    vec![1, 12, 1024, 64],
                    vec![1, 12, 1024, 64]
                ]
            ),
            Some(Shape(vec![1, 12, 1024, 64]))
        );
        assert_eq!(
            problem_shape(
                KernelKind::FusedMlp,
                "SwiGLU",
                &[vec![1, 512, 768], vec![2048, 768]]
            ),
            Some(Shape(vec![512, 768, 2048]))
        );
        assert_eq!(problem_shape(KernelKind::Layernorm, "x", &[]), None);
    }

    #[test]
    fn bound_compares_intensity_with_the_ridge_point() {
        let h200 = lookup_gpu("NVIDIA H200").spec().cloned().unwrap();
        // ridge 989.4e12 / 4.8e12 = 206 FLOP/B; a 4096³ fp16 matmul: 2·4096³ / (3·4096²·2) = 1365
        let big = Shape(vec![4096, 4096, 4096]);
        assert_eq!(
            bound(KernelKind::Matmul, Some(&big), DType::Float16, Some(&h200)),
            Bound::Compute
        );
        // a skinny matmul (M = 1): 2·N·K / ((K + K·N + N)·2) ≈ 1 FLOP/B → memory
        let gemv = Shape(vec![1, 4096, 4096]);
        assert_eq!(
            bound(KernelKind::Matmul, Some(&gemv), DType::Float16, Some(&h200)),
            Bound::Memory
        );
        assert_eq!(
            bound(KernelKind::Softmax, None, DType::Float16, None),
            Bound::Memory
        );
    }
}
