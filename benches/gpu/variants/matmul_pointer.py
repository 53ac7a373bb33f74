"""Variant: the matmul starter before TMA (session 6), one program per tile with pointer
loads. On the H200 (2026-11-30, benches/gpu/compare.sh) 205.5 µs at 4096×4096×4096 and
564.6 µs at 4096×11008×4096, against the TMA starter's 193.5 and 503.9 µs (docs/benchmarks.md).
Kept so that the comparison can be run again. Its docstring follows.

C = A @ B for A [M, K], B [K, N] → C [M, N] in A's dtype.

Starter kernel of autokernel (kind `matmul`). Compute-bound. Each program computes one
BLOCK_M × BLOCK_N tile of C, walking K in steps of BLOCK_K with `tl.dot` (tensor cores,
float32 accumulator), software-pipelined over num_stages shared-memory buffers. Programs
are ordered in groups of GROUP_M tile-rows so that consecutive programs reuse the same
B columns and A rows while they are in L2 (the grouped ordering of Triton's matmul
tutorial). Float32 inputs use `input_precision="ieee"`: Triton's default for float32 is
TF32, which the precision policy forbids (and which misses the float32 tolerance).
Rows and columns past the edge of A and B are wrapped (modulo) on load, which keeps the
loads unmasked, and masked on store; K is masked only when it is not a multiple of
BLOCK_K. Launch parameters that would not fit in shared memory (float32 with deep
pipelines) are shrunk by the wrapper: CONFIG values are hints, never correctness conditions.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "matmul"
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [64],
    "GROUP_M": [1, 8],
    "num_warps": [4, 8],
    "num_stages": [3, 4],
}

# Shared memory the operand buffers may take (bytes); H100/H200 allow 227 KB per block.
SMEM_BUDGET = 200 * 1024


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    # Grouped ordering: GROUP_M tile-rows are swept column by column.
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
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + rn.to(tl.int64)[None, :] * stride_bn

    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
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
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk

    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def _fit(block_m, block_n, block_k, stages, elt):
    """Shrinks a launch until num_stages buffers of the A and B tiles fit SMEM_BUDGET."""
    while stages * (block_m * block_k + block_k * block_n) * elt > SMEM_BUDGET:
        if stages > 2:
            stages -= 1
        elif block_k > 32:
            block_k //= 2
        elif block_n >= block_m and block_n > 32:
            block_n //= 2
        else:
            block_m //= 2
    return block_m, block_n, block_k, stages


def kernel_fn(A, B):
    """A [M, K], B [K, N] → C [M, N] in A's dtype."""
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), dtype=A.dtype, device=A.device)
    bm, bn, bk, stages = _fit(CONFIG["BLOCK_M"], CONFIG["BLOCK_N"], CONFIG["BLOCK_K"],
                              CONFIG["num_stages"], A.element_size())
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _matmul_kernel[grid](A, B, C, M, N, K,
                         A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=CONFIG["GROUP_M"],
                         EVEN_K=K % bk == 0, IEEE=A.dtype == torch.float32,
                         num_warps=CONFIG["num_warps"], num_stages=stages)
    return C
