"""Sum over the last dim of x [rows, cols] → [rows] in x's dtype.

Starter kernel of autokernel (kind `reduce`). Memory-bound: x is read once. Each program
sums BLOCK_ROWS rows, walking the columns in chunks of BLOCK_N and accumulating per lane
in float32 (no reduction inside the loop); the lanes are summed once at the end, in a fixed
order (deterministic). A float16 accumulator would overflow where the exact sum is finite
(the stability stage checks it).

The loads are marked `evict_first` (x is read once: its lines may be the first the L2
drops), as in torch.compile's kernel for the same sum; it brought the kernel to
torch.compile's time (docs/benchmarks.md, "What the session-5 comparisons changed").
Our reading, not measured: the L2 is full of dirty lines before the kernel (the timing's
L2 flush writes; in a model, the previous kernel's output), and evicting x's own clean
lines first spares write-backs. The same mark on the loads of kernels that also write
(rmsnorm, softmax, layernorm) made them slower.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "reduce"
CONFIG = {"BLOCK_ROWS": 1, "BLOCK_N": 2048, "num_warps": 16, "num_stages": 2}
TUNABLES = {
    "BLOCK_ROWS": [1, 2, 4, 8],
    "BLOCK_N": [512, 1024, 2048, 4096],
    "num_warps": [4, 8, 16],
    "num_stages": [2],
}

# Most float32 values one program holds at once (BLOCK_ROWS · BLOCK_N).
MAX_TILE = 16384


@triton.jit
def _sum_kernel(x_ptr, y_ptr, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    # Rows past the end re-read the last row (no mask on the loads); not stored.
    offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
    cols = tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_ROWS, BLOCK_N], tl.float32)
    for start in range(0, n_cols, BLOCK_N):
        c = start + cols
        acc += tl.load(x_ptr + offs_row + c[None, :], mask=(c < n_cols)[None, :], other=0.0,
                       eviction_policy="evict_first").to(tl.float32)
    tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=rows < n_rows)


def kernel_fn(x):
    """x [rows, cols] → y [rows], y[r] = Σ_c x[r, c], in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
    block_n = min(CONFIG["BLOCK_N"], triton.next_power_of_2(n_cols))
    block_rows = max(1, min(CONFIG["BLOCK_ROWS"], MAX_TILE // block_n))
    _sum_kernel[(triton.cdiv(n_rows, block_rows),)](
        x, y, n_rows, n_cols, BLOCK_ROWS=block_rows, BLOCK_N=block_n,
        num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return y
