"""The softmax starter as it was before exp2 (commit dd7f0f5): `tl.exp`, whose
`ex2.approx.f32` carries a subnormal fix-up (benches/gpu/sass_probe.py), measured on the H200
in docs/benchmarks.md's table. Kept to time the starter against it in one run
(benches/gpu/pending.sh). Its own docstring follows.

Row-wise softmax over the last dim of x [rows, cols].

Starter kernel of autokernel (kind `softmax`). Memory-bound: one read, one write. Each
program handles BLOCK_ROWS rows. A row of up to MAX_ROW_BLOCK columns is held in
registers (max, exp, sum, scale: one read). A wider row (a vocabulary, 50257) is read in
chunks of LOOP_BLOCK with an online softmax (running row max and sum, rescaled when the
max grows; Milakov & Gimelshein 2018), then read again to write the output. Wide rows run
on a persistent grid of LOOP_PROGRAMS_PER_SM programs per SM, LOOP_ROWS rows each, so
that the rows in flight (about 3 · 132 · 100 KB = 40 MB at 50257 float16 columns on an
H200) stay in L2 for the second read. All arithmetic in float32.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "softmax"
# Measured on the H200 at 4096x50257 float16 (docs/benchmarks.md): this CONFIG 428 us, the
# one-program-per-2-rows grid it replaced (LOOP_ROWS 2, LOOP_BLOCK 4096, no persistence) 453 us.
CONFIG = {"BLOCK_ROWS": 2, "LOOP_BLOCK": 8192, "LOOP_ROWS": 1, "LOOP_PROGRAMS_PER_SM": 3, "num_warps": 8, "num_stages": 1}
TUNABLES = {
    "BLOCK_ROWS": [1, 2, 4],
    "LOOP_BLOCK": [4096, 8192],
    "LOOP_ROWS": [1, 2],
    "LOOP_PROGRAMS_PER_SM": [0, 3],
    "num_warps": [4, 8, 16],
    "num_stages": [1],
}

# Widest row (in elements, a power of two) held in registers by one program.
MAX_ROW_BLOCK = 16384
# Most float32 values one program holds at once (BLOCK_ROWS · block width).
MAX_TILE = 32768
_SM_COUNT = {}


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_rows, n_cols,
                    BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_ok = rows < n_rows
        # Rows past the end re-read the last row (no NaN, no mask on the loads); not stored.
        offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
        col_ok = cols < n_cols
        x = tl.load(x_ptr + offs_row + cols[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
        e = tl.exp(x - tl.max(x, axis=1)[:, None])
        y = e * (1.0 / tl.sum(e, axis=1))[:, None]
        tl.store(y_ptr + offs_row + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    else:
        # Persistent: program pid handles row blocks pid, pid + programs, ...
        for rb in range(pid, tl.cdiv(n_rows, BLOCK_ROWS), tl.num_programs(0)):
            rows = rb * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            row_ok = rows < n_rows
            offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
            # Pass 1: running row max m and sum s of exp(x − m), one chunk at a time (one exp
            # per element: the rescale exp(m_old − m_new) is per row, not per lane).
            m = tl.full([BLOCK_ROWS], float("-inf"), tl.float32)
            s = tl.zeros([BLOCK_ROWS], tl.float32)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                x = tl.load(x_ptr + offs_row + c[None, :], mask=(c < n_cols)[None, :], other=float("-inf")).to(tl.float32)
                m_new = tl.maximum(m, tl.max(x, axis=1))  # finite: every chunk has a real column
                s = s * tl.exp(m - m_new) + tl.sum(tl.exp(x - m_new[:, None]), axis=1)
                m = m_new
            inv = 1.0 / s
            # Pass 2: normalise and write (these rows were just read: mostly L2 hits).
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_ok = c < n_cols
                x = tl.load(x_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
                y = tl.exp(x - m[:, None]) * inv[:, None]
                tl.store(y_ptr + offs_row + c[None, :], y.to(y_ptr.dtype.element_ty),
                         mask=row_ok[:, None] & col_ok[None, :])


def kernel_fn(x):
    """x [rows, cols] → softmax over the last dim, in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    full = triton.next_power_of_2(n_cols)
    one_pass = full <= MAX_ROW_BLOCK
    block_n = full if one_pass else min(CONFIG["LOOP_BLOCK"], full)
    rows_per_block = CONFIG["BLOCK_ROWS"] if one_pass else CONFIG["LOOP_ROWS"]
    block_rows = max(1, min(rows_per_block, MAX_TILE // block_n))
    grid = (triton.cdiv(n_rows, block_rows),)
    if not one_pass and CONFIG["LOOP_PROGRAMS_PER_SM"] > 0:
        # Persistent grid (0 = one program per row block): see the module docstring.
        dev = x.device
        if dev not in _SM_COUNT:
            _SM_COUNT[dev] = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 4
        grid = (min(grid[0], _SM_COUNT[dev] * CONFIG["LOOP_PROGRAMS_PER_SM"]),)
    _softmax_kernel[grid](x, y, n_rows, n_cols,
                          BLOCK_ROWS=block_rows, BLOCK_N=block_n, ONE_PASS=one_pass,
                          num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return y
