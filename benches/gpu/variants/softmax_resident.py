"""Variant of the softmax starter: rows wider than 16384 columns whose block (from the
16-byte boundary below the row) fits RESIDENT_BLOCK are read once and held in registers by
one program of RESIDENT_WARPS warps (`_resident_kernel`), the way PyTorch's softmax holds
a row in shared memory. On the H200 (2026-11-30) it ran 1135.4 µs at 4096×50257 against
the starter's 419.9, 455.4 against 313.0 at 50256: its SASS has 34 spill stores per thread
at 32 warps (docs/benchmarks.md). Not adopted. The starter's docstring and CONFIG of before
LOOP_WARPS follow.

Row-wise softmax over the last dim of x [rows, cols].

Starter kernel of autokernel (kind `softmax`). Memory-bound: one read, one write. Each
program handles BLOCK_ROWS rows. A row of up to MAX_ROW_BLOCK columns is held in
registers (max, exp, sum, scale: one read). A wider row (a vocabulary, 50257) is read in
chunks of LOOP_BLOCK with an online softmax (running row max and sum, rescaled when the
max grows; Milakov & Gimelshein 2018), then read again to write the output. Wide rows run
on a persistent grid of LOOP_PROGRAMS_PER_SM programs per SM, LOOP_ROWS rows each, so
that the rows in flight (about 3 · 132 · 100 KB = 40 MB at 50257 float16 columns on an
H200) stay in L2 for the second read. All arithmetic in float32.

Exponentials are exp2 of (x − max)·log2 e, which compiles to one multiply and one
`ex2.approx.ftz` (PTX ISA, "ex2"): `tl.exp` compiles to `ex2.approx` without flush-to-zero,
whose subnormal fix-up costs four more instructions per element on sm_90 (SASS of this
file, benches/gpu/sass_probe.py). The wide rows' loop issues about one instruction per
element less with each instruction saved, and at 50257 columns the H200 ran it at the pace
of its instruction count (docs/benchmarks.md). Flushing drops only results below 2⁻¹²⁶.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "softmax"
# Measured on the H200 at 4096x50257 float16 (docs/benchmarks.md): this CONFIG 428 us, the
# one-program-per-2-rows grid it replaced (LOOP_ROWS 2, LOOP_BLOCK 4096, no persistence) 453 us.
CONFIG = {"BLOCK_ROWS": 2, "LOOP_BLOCK": 8192, "LOOP_ROWS": 1, "LOOP_PROGRAMS_PER_SM": 3, "num_warps": 8, "num_stages": 1, "RESIDENT_WARPS": 32}
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
# Widest row (a power of two) read once and held in registers by one program of RESIDENT_WARPS.
RESIDENT_BLOCK = 65536
_SM_COUNT = {}
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(v) = exp2(v · log2 e)


@triton.jit
def _exp(v):
    """exp(v) as exp2(v · log2 e): see the module docstring for why."""
    return tl.math.exp2(v * LOG2E)


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
        e = _exp(x - tl.max(x, axis=1)[:, None])
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
                s = s * _exp(m - m_new) + tl.sum(_exp(x - m_new[:, None]), axis=1)
                m = m_new
            # Pass 2: normalise and write (these rows were just read: mostly L2 hits), with
            # the division by s folded into the exponent: exp(x − m) / s = exp2((x − m)·log2 e − log2 s).
            log2_s = tl.log2(s)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_ok = c < n_cols
                x = tl.load(x_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
                y = tl.math.exp2((x - m[:, None]) * LOG2E - log2_s[:, None])
                tl.store(y_ptr + offs_row + c[None, :], y.to(y_ptr.dtype.element_ty),
                         mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _resident_kernel(x_ptr, y_ptr, n_cols, n_total, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr):
    """One row per program, read once and held in registers (a row of 50257 fp16 is 100 KB:
    with 32 warps, 64 values a thread), as PyTorch's shared-memory softmax reads each row
    once; the loop kernel reads each row twice. The block starts at the 16-byte boundary at
    or before the row, so that its loads are 16 bytes wide whatever the row's offset (the
    lanes outside the row read a neighbour's values, mostly L2 hits, and are masked out of
    the sums and the store); held as 16-bit values packed in pairs, the row takes half the
    registers it would as float32."""
    row_start = tl.program_id(0).to(tl.int64) * n_cols
    base = tl.multiple_of(row_start // ALIGN * ALIGN, ALIGN)
    head = (row_start - base).to(tl.int32)
    j = tl.arange(0, BLOCK_N)
    x = tl.load(x_ptr + base + j, mask=base + j < n_total, other=float("-inf"))
    x = tl.where((j >= head) & (j < head + n_cols), x, float("-inf"))  # exp2(-inf) = 0
    m = tl.max(x, axis=0).to(tl.float32)
    s = tl.sum(_exp(x.to(tl.float32) - m), axis=0)
    y = tl.math.exp2((x.to(tl.float32) - m) * LOG2E - tl.log2(s))
    tl.store(y_ptr + base + j, y.to(y_ptr.dtype.element_ty), mask=(j >= head) & (j < head + n_cols))


def kernel_fn(x):
    """x [rows, cols] → softmax over the last dim, in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    full = triton.next_power_of_2(n_cols)
    align = max(1, 16 // x.element_size())
    resident = triton.next_power_of_2(n_cols + align - 1)
    if full > MAX_ROW_BLOCK and resident <= RESIDENT_BLOCK:
        _resident_kernel[(n_rows,)](x, y, n_cols, x.numel(), BLOCK_N=resident, ALIGN=align,
                                    num_warps=CONFIG["RESIDENT_WARPS"], num_stages=1)
        return y
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
