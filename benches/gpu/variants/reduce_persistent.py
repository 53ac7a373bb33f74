"""Variant of the reduce starter on a persistent grid: PROGRAMS_PER_SM programs per SM
(0 = one program per row block, as the starter), each summing row blocks pid, pid +
programs, ... The starter launches 8192 programs of one 16 KB row at 8192x8192 float16
(75% of copy on the H200, docs/benchmarks.md); this keeps the same per-lane float32
accumulation and fixed-order lane sum (deterministic) and spares the per-program start.
On the H200 43.6 µs against the starter's 42.3 at 8192×8192 (docs/benchmarks.md, "Timed on
the GPU"): not adopted.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "reduce"
CONFIG = {"BLOCK_ROWS": 1, "BLOCK_N": 8192, "PROGRAMS_PER_SM": 4, "num_warps": 8, "num_stages": 2}
TUNABLES = {
    "BLOCK_ROWS": [1, 2],
    "BLOCK_N": [2048, 4096, 8192],
    "PROGRAMS_PER_SM": [0, 2, 4, 8],
    "num_warps": [8, 16],
    "num_stages": [2],
}

# Most float32 values one program holds at once (BLOCK_ROWS · BLOCK_N).
MAX_TILE = 16384
_SM_COUNT = {}


@triton.jit
def _sum_kernel(x_ptr, y_ptr, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    for rb in range(tl.program_id(0), tl.cdiv(n_rows, BLOCK_ROWS), tl.num_programs(0)):
        rows = rb * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        # Rows past the end re-read the last row (no mask on the loads); not stored.
        offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
        acc = tl.zeros([BLOCK_ROWS, BLOCK_N], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            acc += tl.load(x_ptr + offs_row + c[None, :], mask=(c < n_cols)[None, :], other=0.0).to(tl.float32)
        tl.store(y_ptr + rows, tl.sum(acc, axis=1).to(y_ptr.dtype.element_ty), mask=rows < n_rows)


def kernel_fn(x):
    """x [rows, cols] → y [rows], y[r] = Σ_c x[r, c], in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty(x.shape[:-1], dtype=x.dtype, device=x.device)
    block_n = min(CONFIG["BLOCK_N"], triton.next_power_of_2(n_cols))
    block_rows = max(1, min(CONFIG["BLOCK_ROWS"], MAX_TILE // block_n))
    programs = triton.cdiv(n_rows, block_rows)
    if CONFIG["PROGRAMS_PER_SM"] > 0:
        dev = x.device
        if dev not in _SM_COUNT:
            _SM_COUNT[dev] = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 4
        programs = min(programs, _SM_COUNT[dev] * CONFIG["PROGRAMS_PER_SM"])
    _sum_kernel[(programs,)](x, y, n_rows, n_cols, BLOCK_ROWS=block_rows, BLOCK_N=block_n,
                             num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return y
