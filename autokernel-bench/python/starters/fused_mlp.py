"""Gated MLP: out = (act(x·w_gateᵀ) ⊙ (x·w_upᵀ))·w_downᵀ, act SiLU (SwiGLU, the default) or
the tanh GELU (GeGLU, `activation="gelu_tanh"`).

x [T, H], w_gate and w_up [I, H], w_down [H, I] → out [T, H] in x's dtype.

Starter kernel of autokernel (kind `fused_mlp`). Compute-bound: three matmuls of 2·T·H·I
FLOP, in two launches of one tiled matmul kernel:
1. gate/up: each program computes the same BLOCK_M × BLOCK_N tile of x·w_gateᵀ and x·w_upᵀ
   (two float32 accumulators sharing each loaded x tile) and writes
   h = act(gate)·up in x's dtype: the gate and up activations never reach memory.
2. down: out = h·w_downᵀ.
Weights are read in their stored [out, in] layout (B[k, n] = w[n, k]; the K dim is
contiguous). 16-bit inputs whose rows start on 16-byte boundaries (the Tensor Memory
Accelerator's condition, cuTensorMapEncodeTiled) run `_mlp_tma_kernel`: a persistent grid
of one program per SM (times PROGRAMS_PER_SM) walks the output tiles; the blocks arrive by
TMA (tensor descriptors: zero-filled past the edges, the store clipped, no masks),
software-pipelined over num_stages buffers within each tile's K loop (FLATTEN fuses the
tile loop into the K loop, Triton's loop flattening). The down matmul has tiles of its
own width, DOWN_BLOCK_N: with one accumulator it can take 128×256 tiles, faster than
128×128 ones (docs/benchmarks.md, "Session 6", which also times the flattened loop and the
pointer kernel). Anything else (float32, odd strides) runs
`_mlp_matmul_kernel`, one program per tile with pointer loads; float32 (IEEE, on the FMA
units) on square IEEE_BLOCK tiles, BLOCK_K 32 and IEEE_WARPS warps: the tensor-core tiles
hold too many float32 accumulators a thread there (docs/benchmarks.md, "Float32 in the
pointer kernels"; cuBLAS's float32 is faster still). Tiles are ordered in
groups of GROUP_M tile-rows for L2 reuse; float32 inputs use `input_precision="ieee"` (no
TF32). The activation is computed in float32: silu(g) = g·sigmoid(g), and the tanh GELU
as g·sigmoid(2·√(2/π)·(g + 0.044715·g³)), the same function (0.5·(1 + tanh z) = sigmoid(2z)). Launch parameters that would not fit
in shared memory are shrunk by the wrapper: the CONFIG values are hints, never
correctness conditions.
"""

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

KERNEL_KIND = "fused_mlp"
# BLOCK_N is the gate/up tiles' width, DOWN_BLOCK_N the down matmul's (the TMA kernel only).
# TUNABLES leave out BLOCK_N 256: two 128×256 float32 accumulators do not fit in registers,
# and it lost by far (docs/benchmarks.md, "Session 6").
CONFIG = {"BLOCK_M": 128, "BLOCK_N": 128, "DOWN_BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "PROGRAMS_PER_SM": 1, "FLATTEN": 0, "IEEE_BLOCK": 128, "IEEE_WARPS": 8, "num_warps": 8, "num_stages": 3}
TUNABLES = {
    "BLOCK_M": [64, 128],
    "BLOCK_N": [64, 128],
    "DOWN_BLOCK_N": [128, 256],
    "BLOCK_K": [32, 64],
    "GROUP_M": [8],
    "PROGRAMS_PER_SM": [1, 2],
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


# fused_mlp's `activation` values, as the kernels' ACT constexpr
_ACTIVATIONS = {"silu": 0, "gelu_tanh": 1}


@triton.jit
def _act(g, ACT: tl.constexpr):
    """The gate's activation in float32: ACT 0 silu, 1 tanh GELU (through sigmoid(2z))."""
    if ACT == 1:
        return g * tl.sigmoid(1.5957691216057308 * (g + 0.044715 * g * g * g))  # 2·√(2/π)
    else:
        return g * tl.sigmoid(g)


@triton.jit
def _mlp_matmul_kernel(a_ptr, b_ptr, b2_ptr, c_ptr, M, N, K,
                       stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       GROUP_M: tl.constexpr, GATED: tl.constexpr, EVEN_K: tl.constexpr,
                       IEEE: tl.constexpr, ACT: tl.constexpr, EVEN_M: tl.constexpr, EVEN_N: tl.constexpr):
    """C = A·B, or with GATED: C = act(A·B) ⊙ (A·B2) (B and B2 share strides)."""
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
    rm = offs_m % M
    rn = offs_n % N
    # the hints hold only where no tile wraps around its dim (a false one let the compiler
    # vectorize misaligned loads)
    if EVEN_M:
        rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_M), BLOCK_M)
    if EVEN_N:
        rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_N), BLOCK_N)
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
        acc = _act(acc, ACT) * acc2  # act(gate) · up
    c_ptrs = c_ptr + offs_m.to(tl.int64)[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


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
def _mlp_tma_kernel(a_desc, w_desc, w2_desc, c_desc, M, N, K, num_tiles,
                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                    GROUP_M: tl.constexpr, GATED: tl.constexpr, FLATTEN: tl.constexpr,
                    ACT: tl.constexpr):
    """C = A·Wᵀ, or with GATED: C = act(A·Wᵀ) ⊙ (A·W2ᵀ), on a persistent grid. a_desc
    covers A [M, K] in [BLOCK_M, BLOCK_K] blocks, w_desc and w2_desc W [N, K] in
    [BLOCK_N, BLOCK_K] blocks, c_desc C [M, N] in [BLOCK_M, BLOCK_N] blocks. num_tiles =
    cdiv(M, BLOCK_M) · cdiv(N, BLOCK_N), from the host."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    for tile in tl.range(tl.program_id(0), num_tiles, tl.num_programs(0), flatten=FLATTEN):
        pid_m, pid_n = _tile_of(tile, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        if GATED:
            acc2 = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for ki in range(k_tiles):
            off_k = ki * BLOCK_K
            a = a_desc.load([off_m, off_k])
            acc = tl.dot(a, w_desc.load([off_n, off_k]).T, acc)
            if GATED:
                acc2 = tl.dot(a, w2_desc.load([off_n, off_k]).T, acc2)
        if GATED:
            acc = _act(acc, ACT) * acc2  # act(gate) · up
        c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


def _fit(block_m, block_n, block_k, stages, elt, n_b, budget=SMEM_BUDGET, c_share=0.0):
    """Shrinks a launch until num_stages buffers of the A and n_b B tiles, plus `c_share` of
    a C tile (the TMA store's staging), fit `budget` bytes. Stages go first (down to 2),
    then BLOCK_K (to 32), then the tile (to 16 × 16, which fits any budget here: the loop
    always ends)."""
    def need():
        return (stages * (block_m * block_k + n_b * block_k * block_n) + c_share * block_m * block_n) * elt

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


def _launch(a, b, b2, c, M, N, K, stride_bk, stride_bn, gated, act=0):
    """c = a·b (gated: act(a·b) ⊙ (a·b2)) with `_mlp_matmul_kernel`, the pointer kernel."""
    ieee = a.dtype == torch.float32
    if ieee:
        # IEEE float32 runs on the FMA units: square IEEE_BLOCK tiles (module docstring)
        block, block_k, warps = CONFIG["IEEE_BLOCK"], 32, CONFIG["IEEE_WARPS"]
        bm, bn, bk, stages = _fit(block, block, block_k, CONFIG["num_stages"], a.element_size(), 2 if gated else 1)
    else:
        warps = CONFIG["num_warps"]
        bm, bn, bk, stages = _fit(CONFIG["BLOCK_M"], CONFIG["BLOCK_N"], CONFIG["BLOCK_K"],
                                  CONFIG["num_stages"], a.element_size(), 2 if gated else 1)
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    _mlp_matmul_kernel[grid](a, b, b2, c, M, N, K, a.stride(0), a.stride(1), stride_bk, stride_bn,
                             c.stride(0), c.stride(1),
                             BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=CONFIG["GROUP_M"],
                             GATED=gated, EVEN_K=K % bk == 0, IEEE=ieee, ACT=act,
                             EVEN_M=M % bm == 0, EVEN_N=N % bn == 0, num_warps=warps, num_stages=stages)


def _tma_ready(t):
    """True when TMA can read row-major 2-D tensor `t`: 16-bit elements, base and row
    stride multiples of 16 bytes (cuTensorMapEncodeTiled)."""
    elt = t.element_size()
    return elt == 2 and t.stride(1) == 1 and t.data_ptr() % 16 == 0 and (t.stride(0) * elt) % 16 == 0


def _sm_count(device):
    """Multiprocessors of `device` (4 on the CPU interpreter), cached."""
    if device not in _SM_COUNT:
        _SM_COUNT[device] = (torch.cuda.get_device_properties(device).multi_processor_count
                             if device.type == "cuda" else 4)
    return _SM_COUNT[device]


def _launch_tma(a, w, w2, c, gated, act=0):
    """c = a·wᵀ (gated: act(a·wᵀ) ⊙ (a·w2ᵀ)) with `_mlp_tma_kernel`; a [M, K], w and w2
    [N, K], c [M, N]."""
    M, K = a.shape
    N = w.shape[0]
    block_n = CONFIG["BLOCK_N"] if gated else CONFIG["DOWN_BLOCK_N"]
    # c_share 1: the store's staging buffer, a whole C tile, shares the shared memory
    bm, bn, bk, stages = _fit(CONFIG["BLOCK_M"], block_n, CONFIG["BLOCK_K"], CONFIG["num_stages"],
                              a.element_size(), 2 if gated else 1, TMA_SMEM_BUDGET, c_share=1.0)
    num_tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    grid = (min(num_tiles, _sm_count(a.device) * CONFIG["PROGRAMS_PER_SM"]),)
    _mlp_tma_kernel[grid](TensorDescriptor.from_tensor(a, [bm, bk]), TensorDescriptor.from_tensor(w, [bn, bk]),
                          TensorDescriptor.from_tensor(w2, [bn, bk]), TensorDescriptor.from_tensor(c, [bm, bn]),
                          M, N, K, num_tiles, BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=CONFIG["GROUP_M"],
                          GATED=gated, FLATTEN=bool(CONFIG["FLATTEN"]), ACT=act,
                          num_warps=CONFIG["num_warps"], num_stages=stages)


def kernel_fn(x, w_gate, w_up, w_down, activation="silu"):
    """x [T, H], w_gate/w_up [I, H], w_down [H, I] → out [T, H] in x's dtype; `activation`
    the gate's, ``silu`` or ``gelu_tanh``."""
    if activation not in _ACTIVATIONS:
        raise ValueError(f"unknown activation {activation!r}; expected one of {', '.join(_ACTIVATIONS)}")
    act = _ACTIVATIONS[activation]
    x, w_gate, w_up, w_down = x.contiguous(), w_gate.contiguous(), w_up.contiguous(), w_down.contiguous()
    T, H = x.shape
    I = w_gate.shape[0]
    h = torch.empty((T, I), dtype=x.dtype, device=x.device)
    out = torch.empty((T, H), dtype=x.dtype, device=x.device)
    if all(_tma_ready(t) for t in (x, w_gate, w_up, w_down, h, out)) and len({t.dtype for t in (x, w_gate, w_up, w_down)}) == 1:
        _launch_tma(x, w_gate, w_up, h, True, act)
        _launch_tma(h, w_down, w_down, out, False)
        return out
    # h = act(x·w_gateᵀ) ⊙ (x·w_upᵀ): B[k, n] = w[n, k], strides (1, H).
    _launch(x, w_gate, w_up, h, T, I, H, w_gate.stride(1), w_gate.stride(0), True, act)
    # out = h·w_downᵀ: B[k, n] = w_down[n, k], strides (1, I).
    _launch(h, w_down, w_down, out, T, H, I, w_down.stride(1), w_down.stride(0), False)
    return out
