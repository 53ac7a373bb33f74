"""C = A @ B (+ bias) for A [M, K], B [K, N] (bias [N] with `has_bias`) → C [M, N] in A's dtype.

Parameter: `has_bias` (false; true: the bias is added to every row in float32 before the
one rounding to the output dtype, the epilogue of nn.Linear and GPT-2's Conv1D).

Starter kernel of autokernel (kind `matmul`). Compute-bound. Two kernels:

- 16-bit inputs whose rows start on 16-byte boundaries (the Tensor Memory Accelerator's
  condition: base and row strides multiples of 16 bytes, CUDA driver API,
  cuTensorMapEncodeTiled) go to `_matmul_tma_kernel`: a persistent grid of one program
  per SM (times PROGRAMS_PER_SM) walks the output tiles in grouped order; each tile's A
  and B blocks arrive by TMA (tensor descriptors; the copy engine zero-fills past the
  edges and clips the store, so no masks), software-pipelined over num_stages buffers
  within each tile's K loop. FLATTEN fuses the tile loop into the K loop (Triton's loop
  flattening), so that the next tile's loads could overlap this tile's epilogue. B may
  be row-major or the transpose of a row-major [N, K] tensor (nn.Linear's weight).
  SPLIT_EPILOGUE writes the tile in two halves, which halves the shared-memory staging
  of the store. With CONFIG (the tile loop not flattened) it runs near cuBLAS at 16 bits
  and faster than the pointer kernel; the flattened loop was level with it
  (docs/benchmarks.md, "Session 6").
- anything else (float32, odd strides) goes to `_matmul_kernel`: one program per
  BLOCK_M × BLOCK_N tile with pointer loads, walking K in steps of BLOCK_K. Float32 (IEEE,
  so FMA units, not tensor cores) takes square IEEE_BLOCK tiles, BLOCK_K 32 and IEEE_WARPS
  warps: the tensor-core tiles hold too many accumulators a thread and run far slower
  (docs/benchmarks.md, "Float32 in the pointer kernels").

Both accumulate in float32 with `tl.dot` (tensor cores). Programs are ordered in groups
of GROUP_M tile-rows so that consecutive programs reuse the same B columns and A rows
while they are in L2 (the grouped ordering of Triton's matmul tutorial). Float32 inputs
use `input_precision="ieee"`: Triton's default for float32 is TF32, which the precision
policy forbids (and which misses the float32 tolerance). In the pointer kernel, rows and
columns past the edge of A and B are wrapped (modulo) on load, which keeps the loads
unmasked, and masked on store; K is masked only when it is not a multiple of BLOCK_K.
Launch parameters that would not fit in shared memory (float32 with deep pipelines) are
shrunk by the wrapper: CONFIG values are hints, never correctness conditions.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

KERNEL_KIND = "matmul"
# The TMA kernel's keys as measured on the H200 (module docstring); the pointer kernel shares
# BLOCK_*, GROUP_M, num_warps and num_stages, except in float32 (IEEE_BLOCK, IEEE_WARPS).
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "PROGRAMS_PER_SM": 1, "SPLIT_EPILOGUE": 1, "FLATTEN": 0, "IEEE_BLOCK": 64, "IEEE_WARPS": 4, "num_warps": 8, "num_stages": 3}
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128, 256],
    "BLOCK_K": [64],
    "GROUP_M": [1, 8],
    "PROGRAMS_PER_SM": [1, 2],
    "SPLIT_EPILOGUE": [0, 1],
    "FLATTEN": [0, 1],
    "IEEE_BLOCK": [32, 64, 128],
    "IEEE_WARPS": [2, 4, 8],
    "num_warps": [4, 8],
    "num_stages": [3, 4],
}

# Shared memory the operand buffers may take (bytes); H100/H200 allow 227 KB per block
# (CUDA C++ Programming Guide, technical specifications, compute capability 9.0).
SMEM_BUDGET = 200 * 1024
# The TMA kernel's budget: its operand buffers plus the staging tile of its store.
TMA_SMEM_BUDGET = 224 * 1024
_SM_COUNT = {}


@triton.jit
def _matmul_kernel(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
                   stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                   GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, IEEE: tl.constexpr,
                   HAS_BIAS: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
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
    rm = offs_m % M
    rn = offs_n % N
    # the hints hold only where no tile wraps around its dim (a false one let the compiler
    # vectorize misaligned loads)
    if EVEN_M:
        rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)
    if EVEN_N:
        rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)
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

    if HAS_BIAS:
        # rn: the wrapped columns, in bounds; the store masks the wrapped ones
        acc += tl.load(bias_ptr + rn).to(tl.float32)[None, :]
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def _tile_of(tile, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """(pid_m, pid_n) of output tile number `tile` in grouped order: GROUP_M tile-rows are
    swept column by column."""
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (tile // num_pid_in_group) * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + (tile % num_pid_in_group) % group_size_m
    pid_n = (tile % num_pid_in_group) // group_size_m
    return pid_m, pid_n


@triton.jit
def _matmul_tma_kernel(a_desc, b_desc, c_desc, bias_ptr, M, N, K, num_tiles,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, B_TRANSPOSED: tl.constexpr,
                       SPLIT_EPILOGUE: tl.constexpr, FLATTEN: tl.constexpr,
                       HAS_BIAS: tl.constexpr):
    """Persistent TMA matmul (module docstring). b_desc covers B [K, N], or with
    B_TRANSPOSED Bᵀ [N, K]; c_desc's block is [BLOCK_M, BLOCK_N], halved along N with
    SPLIT_EPILOGUE. num_tiles = cdiv(M, BLOCK_M) · cdiv(N, BLOCK_N), from the host. With
    HAS_BIAS, bias_ptr's [N] vector is added to the float32 tile (a plain masked load: one
    row of BLOCK_N per tile, next to the tile's K loop)."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), flatten=FLATTEN):
        pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])
            if B_TRANSPOSED:
                b = b_desc.load([off_n, off_k]).T
            else:
                b = b_desc.load([off_k, off_n])
            acc = tl.dot(a, b, acc)
        if HAS_BIAS:
            offs_n = off_n + tl.arange(0, BLOCK_N)
            acc += tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0).to(tl.float32)[None, :]
        if SPLIT_EPILOGUE:
            halves = tl.permute(tl.reshape(acc, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1))
            left, right = tl.split(halves)
            c_desc.store([off_m, off_n], left.to(c_desc.dtype))
            c_desc.store([off_m, off_n + BLOCK_N // 2], right.to(c_desc.dtype))
        else:
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def _fit(block_m, block_n, block_k, stages, elt, budget=SMEM_BUDGET, c_share=0.0):
    """Shrinks a launch until num_stages buffers of the A and B tiles, plus `c_share` of a
    C tile (the TMA store's staging: 1, or 0.5 when stored in halves), fit `budget` bytes.
    Stages go first (down to 2), then BLOCK_K (to 32), then the tile (to 16 × 16, which
    fits any budget here: the loop always ends)."""
    def need():
        return (stages * (block_m * block_k + block_k * block_n) + c_share * block_m * block_n) * elt

    while need() > budget:
        if stages > 2:
            stages -= 1
        elif block_k > 32:
            block_k //= 2
        elif block_n >= block_m and block_n > 16:
            block_n //= 2
        elif block_m > 16:
            block_m //= 2
        else:
            break
    return block_m, block_n, block_k, stages


def _tma_ready(t):
    """True when TMA can read 2-D tensor `t` row by row or column by column: 16-bit
    elements, base and the non-unit stride multiples of 16 bytes (cuTensorMapEncodeTiled)."""
    elt = t.element_size()
    if elt != 2 or t.data_ptr() % 16:
        return False
    if t.stride(1) == 1:
        return (t.stride(0) * elt) % 16 == 0
    return t.stride(0) == 1 and (t.stride(1) * elt) % 16 == 0


def _sm_count(device):
    """Multiprocessors of `device` (4 on the CPU interpreter), cached."""
    if device not in _SM_COUNT:
        _SM_COUNT[device] = (torch.cuda.get_device_properties(device).multi_processor_count
                             if device.type == "cuda" else 4)
    return _SM_COUNT[device]


def _matmul_tma(A, B, C, bias, bm, bn, bk, stages):
    """Launches `_matmul_tma_kernel` for C = A·B (+ bias, None: none) on a persistent grid
    (module docstring)."""
    M, K = A.shape
    N = B.shape[1]
    b_transposed = B.stride(1) != 1
    split = CONFIG["SPLIT_EPILOGUE"] and bn >= 32
    a_desc = TensorDescriptor.from_tensor(A, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(B.t(), [bn, bk]) if b_transposed else TensorDescriptor.from_tensor(B, [bk, bn])
    c_desc = TensorDescriptor.from_tensor(C, [bm, bn // 2 if split else bn])
    num_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    grid = (min(num_tiles, _sm_count(A.device) * CONFIG["PROGRAMS_PER_SM"]),)
    _matmul_tma_kernel[grid](a_desc, b_desc, c_desc, C if bias is None else bias, M, N, K, num_tiles,
                             BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=CONFIG["GROUP_M"],
                             B_TRANSPOSED=b_transposed, SPLIT_EPILOGUE=bool(split),
                             FLATTEN=bool(CONFIG["FLATTEN"]), HAS_BIAS=bias is not None,
                             num_warps=CONFIG["num_warps"], num_stages=stages)


def kernel_fn(A, B, bias=None, has_bias=False):
    """A [M, K], B [K, N] (+ bias [N] when has_bias) → C [M, N] in A's dtype."""
    M, K = A.shape
    N = B.shape[1]
    C = torch.empty((M, N), dtype=A.dtype, device=A.device)
    # without has_bias the judge passes no bias; the pointer argument is then unread
    bias = bias.contiguous() if has_bias and bias is not None else None
    if A.dtype == B.dtype and _tma_ready(A) and A.stride(1) == 1 and _tma_ready(B) and _tma_ready(C):
        # The store's staging buffer (a C tile, or half of one) shares the shared memory.
        c_share = 0.5 if CONFIG["SPLIT_EPILOGUE"] else 1.0
        _matmul_tma(A, B, C, bias, *_fit(CONFIG["BLOCK_M"], CONFIG["BLOCK_N"], CONFIG["BLOCK_K"],
                                   CONFIG["num_stages"], A.element_size(), TMA_SMEM_BUDGET, c_share))
        return C
    ieee = A.dtype == torch.float32
    if ieee:
        # IEEE float32 runs on the FMA units: square IEEE_BLOCK tiles (module docstring)
        block, block_k, warps = CONFIG["IEEE_BLOCK"], 32, CONFIG["IEEE_WARPS"]
        bm, bn, bk, stages = _fit(block, block, block_k, CONFIG["num_stages"], A.element_size())
    else:
        warps = CONFIG["num_warps"]
        bm, bn, bk, stages = _fit(CONFIG["BLOCK_M"], CONFIG["BLOCK_N"], CONFIG["BLOCK_K"],
                                  CONFIG["num_stages"], A.element_size())
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _matmul_kernel[grid](A, B, C, C if bias is None else bias, M, N, K,
                         A.stride(0), A.stride(1), B.stride(0), B.stride(1), C.stride(0), C.stride(1),
                         BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=CONFIG["GROUP_M"],
                         EVEN_K=K % bk == 0, IEEE=ieee, HAS_BIAS=bias is not None,
                         EVEN_M=M % bm == 0, EVEN_N=N % bn == 0, num_warps=warps, num_stages=stages)
    return C
