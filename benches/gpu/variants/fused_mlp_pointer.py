"""Variant: the fused_mlp starter before TMA (session 6), one program per tile with pointer
loads. On the H200 (2026-11-30, benches/gpu/compare.sh) 961.6 µs at 2048×4096×11008 against
the first TMA starter's 896.8 µs in the same run; 973.0 against the TMA starter with
128×256 down tiles' 858.7 in a later one (docs/benchmarks.md). Kept so that the comparison
can be run again. Its docstring follows.

SwiGLU MLP: out = (silu(x·w_gateᵀ) ⊙ (x·w_upᵀ))·w_downᵀ.

x [T, H], w_gate and w_up [I, H], w_down [H, I] → out [T, H] in x's dtype.

Starter kernel of autokernel (kind `fused_mlp`). Compute-bound: three matmuls of 2·T·H·I
FLOP. Two launches of one tiled matmul kernel:
1. gate/up: each program computes the same BLOCK_M × BLOCK_N tile of x·w_gateᵀ and x·w_upᵀ
   (two float32 accumulators sharing each loaded x tile) and writes
   h = silu(gate)·up in x's dtype: the gate and up activations never reach memory.
2. down: out = h·w_downᵀ.
Weights are read in their stored [out, in] layout (B[k, n] = w[n, k]; the K dim is
contiguous). Tiles are ordered in groups of GROUP_M tile-rows for L2 reuse; float32
inputs use `input_precision="ieee"` (no TF32). silu(g) = g·sigmoid(g) is computed in
float32. Launch parameters that would not fit in shared memory are shrunk by the wrapper:
the CONFIG values are hints, never correctness conditions.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "fused_mlp"
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [32, 64],
    "GROUP_M": [8],
    "num_warps": [4, 8],
    "num_stages": [3, 4],
}

# Shared memory the operand buffers may take (bytes); H100/H200 allow 227 KB per block.
SMEM_BUDGET = 200 * 1024


@triton.jit
def _mlp_matmul_kernel(a_ptr, b_ptr, b2_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, GATED: tl.constexpr, EVEN_K: tl.constexpr,
                       IEEE: tl.constexpr):
    """C = A·B, or with GATED: C = silu(A·B) ⊙ (A·B2) (B and B2 share strides)."""
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (pid % num_pid_in_group) % group_size_m
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rm = tl.max_contiguous(tl.multiple_of(offs_m % M, BLOCK_M), BLOCK_M)
    rn = tl.max_contiguous(tl.multiple_of(offs_n % N, BLOCK_N), BLOCK_N)
    a_ptrs = a_ptr + rm.to(tl.int64)[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_off = offs_k[:, None] * stride_bk + rn.to(tl.int64)[None, :] * stride_bn
    b_ptrs = b_ptr + b_off

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    if GATED:
        b2_ptrs = b2_ptr + b_off
        acc2 = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
        else:
            k_left = K - k * BLOCK_K
            a = tl.load(a_ptrs, mask=offs_k[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=offs_k[:, None] < k_left, other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        if GATED:
            if EVEN_K:
                b2 = tl.load(b2_ptrs)
            else:
                b2 = tl.load(b2_ptrs, mask=offs_k[:, None] < K - k * BLOCK_K, other=0.0)
            if IEEE:
                acc2 = tl.dot(a, b2, acc2, input_precision="ieee")
            else:
                acc2 = tl.dot(a, b2, acc2)
            b2_ptrs += BLOCK_K * stride_bk
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    if GATED:
        acc = acc * tl.sigmoid(acc) * acc2  # silu(gate) · up
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _fit(block_m, block_n, block_k, stages, elt, n_b):
    """Shrinks a launch until num_stages buffers of the A and n_b B tiles fit SMEM_BUDGET."""
    while stages * (block_m * block_k + n_b * block_k * block_n) * elt > SMEM_BUDGET:
        if stages > 2:
            stages -= 1
        elif block_k > 32:
            block_k //= 2
        elif block_n >= block_m and block_n > 32:
            block_n //= 2
        else:
            block_m //= 2
    return block_m, block_n, block_k, stages


def _launch(a, b, b2, c, M, N, K, stride_bk, stride_bn, gated):
    bm, bn, bk, stages = _fit(CONFIG["BLOCK_M"], CONFIG["BLOCK_N"], CONFIG["BLOCK_K"],
                              CONFIG["num_stages"], a.element_size(), 2 if gated else 1)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _mlp_matmul_kernel[grid](a, b, b2, c, M, N, K, a.stride(0), a.stride(1), stride_bk, stride_bn,
                             c.stride(0), c.stride(1),
                             BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=CONFIG["GROUP_M"],
                             GATED=gated, EVEN_K=K % bk == 0, IEEE=a.dtype == torch.float32,
                             num_warps=CONFIG["num_warps"], num_stages=stages)


def kernel_fn(x, w_gate, w_up, w_down):
    """x [T, H], w_gate/w_up [I, H], w_down [H, I] → out [T, H] in x's dtype."""
    x, w_gate, w_up, w_down = x.contiguous(), w_gate.contiguous(), w_up.contiguous(), w_down.contiguous()
    T, H = x.shape
    I = w_gate.shape[0]
    h = torch.empty((T, I), dtype=x.dtype, device=x.device)
    out = torch.empty((T, H), dtype=x.dtype, device=x.device)
    # h = silu(x·w_gateᵀ) ⊙ (x·w_upᵀ): B[k, n] = w[n, k], strides (1, H).
    _launch(x, w_gate, w_up, h, T, I, H, w_gate.stride(1), w_gate.stride(0), True)
    # out = h·w_downᵀ: B[k, n] = w_down[n, k], strides (1, I).
    _launch(h, w_down, w_down, out, T, H, I, w_down.stride(1), w_down.stride(0), False)
    return out
