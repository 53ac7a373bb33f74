"""Scaled-dot-product attention, O = softmax(Q·Kᵀ·scale + mask)·V.

Q and O are [batch, heads, seq, head_dim], K and V [batch, kv_heads, seq, head_dim]
(grouped-query attention: Q head h reads K/V head h // (heads / kv_heads)). With `causal`
(the default) query i attends to keys j ≤ i; `scale` defaults to 1/√head_dim; with
`has_mask` the additive key-padding `mask` [batch, seq] (0, or −inf / a large negative
number for a padded key) is added to the scaled scores.

Starter kernel of autokernel (kind `flash_attention`), FlashAttention-2 style (Dao 2023):
each program owns BLOCK_M queries of one (batch, head), keeps them in registers, and
streams K and V in blocks of BLOCK_N through an online softmax (running row max m, row sum
l, rescaled accumulator), so the seq × seq score matrix never reaches memory. Key blocks
entirely below the diagonal run without any mask; only the blocks that cross the
diagonal are masked; blocks above it are skipped (half the work of the full matrix).
Without `causal` every key block but a partial last one runs unmasked. A padding mask may
hide every key of a block from a row (left padding): the online softmax then shifts by 0
while the row max is still −inf, so that exp2(−inf − (−inf)) never makes a NaN.
Query blocks are launched longest-first across all heads (the heads on the grid's fast
axis), so that the causal imbalance evens out at the tail (faster than launching each
head's blocks longest-first in turn: docs/benchmarks.md, "What the session-5 comparisons
changed"). Scores are scaled by log2(e)·scale (and the mask by log2(e))
so that exp2 can be used. Accumulation in float32; the probabilities are rounded to the
input dtype for the P·V product, as in FlashAttention.
Float32 inputs use `input_precision="ieee"` (no TF32, per the precision policy), which runs
on the FMA units, not the tensor cores: they take tiles of their own (IEEE_BLOCK_M ×
IEEE_BLOCK_N, IEEE_WARPS warps): there the float16 tiles run far slower
(docs/benchmarks.md, "Float32 in the pointer kernels").
"""

import math

import torch
import triton
import triton.language as tl

KERNEL_KIND = "flash_attention"
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 64, "IEEE_BLOCK_M": 32, "IEEE_BLOCK_N": 32, "IEEE_WARPS": 4, "num_warps": 8, "num_stages": 3}
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [32, 64, 128],
    "IEEE_BLOCK_M": [32, 64],
    "IEEE_BLOCK_N": [32, 64],
    "IEEE_WARPS": [4, 8],
    "num_warps": [4, 8],
    "num_stages": [1, 2, 3, 4],
}

# Shared memory the K/V buffers and the Q tile may take (bytes); H100/H200 allow 227 KB.
SMEM_BUDGET = 200 * 1024


@triton.jit
def _attend_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, mask_ptrs, start_n, offs_m, offs_n, offs_d, seq,
                  head_dim, qk_scale, BLOCK_N: tl.constexpr, MASKED: tl.constexpr, EVEN_D: tl.constexpr,
                  IEEE: tl.constexpr, CAUSAL: tl.constexpr, HAS_MASK: tl.constexpr):
    """One step of the online softmax over keys [start_n, start_n + BLOCK_N)."""
    keys = start_n + offs_n
    if MASKED:
        kv_mask = keys[:, None] < seq
        if not EVEN_D:
            kv_mask = kv_mask & (offs_d[None, :] < head_dim)
        k = tl.load(k_ptrs + start_n * head_dim, mask=kv_mask, other=0.0)
        v = tl.load(v_ptrs + start_n * head_dim, mask=kv_mask, other=0.0)
    elif EVEN_D:
        k = tl.load(k_ptrs + start_n * head_dim)
        v = tl.load(v_ptrs + start_n * head_dim)
    else:
        d_mask = offs_d[None, :] < head_dim
        k = tl.load(k_ptrs + start_n * head_dim, mask=d_mask, other=0.0)
        v = tl.load(v_ptrs + start_n * head_dim, mask=d_mask, other=0.0)
    if IEEE:
        qk = tl.dot(q, tl.trans(k), input_precision="ieee")
    else:
        qk = tl.dot(q, tl.trans(k))
    qk = qk * qk_scale
    if HAS_MASK:
        pad = tl.load(mask_ptrs + start_n, mask=keys < seq, other=float("-inf")).to(tl.float32)
        qk = qk + pad[None, :] * 1.4426950408889634
    if MASKED:
        keep = keys[None, :] < seq
        if CAUSAL:
            keep = keep & (offs_m[:, None] >= keys[None, :])
        qk = tl.where(keep, qk, float("-inf"))
    m_new = tl.maximum(m_i, tl.max(qk, axis=1))
    if HAS_MASK:
        # a row whose keys so far are all padded has m_new = -inf: shift by 0 instead
        m_new = tl.where(m_new == float("-inf"), 0.0, m_new)
    # Without a padding mask every row has seen at least one key before or in this block
    # (key 0 is not masked), so m_new is finite and exp2(-inf - m_new) = 0 for masked keys.
    p = tl.exp2(qk - m_new[:, None])
    alpha = tl.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = acc * alpha[:, None]
    if IEEE:
        acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
    else:
        acc = tl.dot(p.to(v.dtype), v, acc)
    return acc, l_i, m_new


@triton.jit
def _flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, mask_ptr, seq, head_dim, heads, group, qk_scale,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
                            EVEN_D: tl.constexpr, IEEE: tl.constexpr, CAUSAL: tl.constexpr,
                            HAS_MASK: tl.constexpr):
    # Longest query blocks (most keys) first, across all heads: the query block is the
    # grid's slow axis (CUDA launches blocks x-fastest), so every head's longest block runs
    # before any head's next one.
    start_m = tl.num_programs(1) - 1 - tl.program_id(1)
    bh = tl.program_id(0)
    base = bh.to(tl.int64) * seq * head_dim
    b = bh // heads
    # K/V head of this Q head: heads // group of them per batch (grouped-query attention)
    kv_base = (b * (heads // group) + (bh % heads) // group).to(tl.int64) * seq * head_dim
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    mask_ptrs = mask_ptr + b.to(tl.int64) * seq + offs_n

    q_mask = offs_m[:, None] < seq
    if not EVEN_D:
        q_mask = q_mask & (offs_d[None, :] < head_dim)
    q = tl.load(q_ptr + base + offs_m[:, None] * head_dim + offs_d[None, :], mask=q_mask, other=0.0)
    k_ptrs = k_ptr + kv_base + offs_n[:, None] * head_dim + offs_d[None, :]
    v_ptrs = v_ptr + kv_base + offs_n[:, None] * head_dim + offs_d[None, :]

    m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)

    if CAUSAL:
        # Keys [0, lo) precede every query of this block and exist: no causal mask.
        lo = (start_m * BLOCK_M) // BLOCK_N * BLOCK_N
        # Keys [lo, hi) cross the diagonal (or the end of the sequence): masked.
        hi = tl.minimum((start_m + 1) * BLOCK_M, seq)
    else:
        # Every whole key block unmasked, a partial last one masked at the sequence's end.
        lo = seq // BLOCK_N * BLOCK_N
        hi = seq
    for start_n in range(0, lo, BLOCK_N):
        acc, l_i, m_i = _attend_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, mask_ptrs, start_n, offs_m, offs_n,
                                      offs_d, seq, head_dim, qk_scale, BLOCK_N, False, EVEN_D, IEEE, CAUSAL,
                                      HAS_MASK)
    for start_n in range(lo, hi, BLOCK_N):
        acc, l_i, m_i = _attend_block(acc, l_i, m_i, q, k_ptrs, v_ptrs, mask_ptrs, start_n, offs_m, offs_n,
                                      offs_d, seq, head_dim, qk_scale, BLOCK_N, True, EVEN_D, IEEE, CAUSAL,
                                      HAS_MASK)

    out = acc / l_i[:, None]
    tl.store(o_ptr + base + offs_m[:, None] * head_dim + offs_d[None, :], out.to(o_ptr.dtype.element_ty),
             mask=q_mask)


def _fit(block_m, block_n, block_d, stages, elt):
    """Shrinks a launch until the Q tile and num_stages K/V buffers fit SMEM_BUDGET."""
    while (block_m + 2 * max(stages, 1) * block_n) * block_d * elt > SMEM_BUDGET:
        if stages > 2:
            stages -= 1
        elif block_n > 32:
            block_n //= 2
        elif block_m > 64:
            block_m //= 2
        else:
            break
    return block_m, block_n, stages


def kernel_fn(Q, K, V, mask=None, causal=True, scale=None, kv_heads=None, has_mask=False):
    """Q [batch, heads, seq, head_dim], K, V [batch, kv_heads, seq, head_dim] (kv_heads
    dividing heads; read from K's shape, the `kv_heads` keyword only names it), optional
    additive `mask` [batch, seq] → attention output shaped and typed as Q."""
    Q, K, V = Q.contiguous(), K.contiguous(), V.contiguous()
    batch, heads, seq, head_dim = Q.shape
    group = heads // K.shape[1]
    has_mask = mask is not None
    mask = mask.contiguous() if has_mask else Q  # a pointer the kernel never reads
    O = torch.empty_like(Q)
    block_d = max(16, triton.next_power_of_2(head_dim))
    ieee = Q.dtype == torch.float32
    # float32 (IEEE, FMA units) has tiles of its own: module docstring
    block_m, block_n, warps = ((CONFIG["IEEE_BLOCK_M"], CONFIG["IEEE_BLOCK_N"], CONFIG["IEEE_WARPS"]) if ieee
                               else (CONFIG["BLOCK_M"], CONFIG["BLOCK_N"], CONFIG["num_warps"]))
    bm, bn, stages = _fit(block_m, block_n, block_d, CONFIG["num_stages"], Q.element_size())
    scale = 1.0 / math.sqrt(head_dim) if scale is None else float(scale)
    qk_scale = scale * 1.4426950408889634  # log2(e)·scale, for exp2
    grid = (batch * heads, triton.cdiv(seq, bm))
    _flash_attention_kernel[grid](Q, K, V, O, mask, seq, head_dim, heads, group, qk_scale,
                                  BLOCK_M=bm, BLOCK_N=bn, BLOCK_D=block_d,
                                  EVEN_D=block_d == head_dim, IEEE=ieee, CAUSAL=bool(causal),
                                  HAS_MASK=has_mask,
                                  num_warps=warps, num_stages=stages)
    return O
