"""Row-wise softmax over the last dim of x [rows, cols].

Starter kernel of autokernel (kind `softmax`). Memory-bound: one read, one write. Each
program handles BLOCK_ROWS rows. A row of up to MAX_ROW_BLOCK columns is held in
registers (max, exp, sum, scale: one read). A wider row (a vocabulary, 50257) is read in
chunks of LOOP_BLOCK with an online softmax (running row max and sum, rescaled when the
max grows; Milakov & Gimelshein 2018), then read again to write the output, by programs of
LOOP_WARPS warps (the one-pass rows keep num_warps: a tuner that changes one path's warps
leaves the other's alone). Wide rows may run on a persistent grid of LOOP_PROGRAMS_PER_SM
programs per SM (0: one program per LOOP_ROWS rows). On the H200 at 4096×50257 float16,
one program of 16 warps per row took 394 µs, the persistent grid of 3 programs of 8 warps
per SM 418 µs (`autokernel tune`, docs/benchmarks.md). LOOP_BLOCK 16384 suits rows that
start on a 16-byte boundary (151.0 against 176.8 µs at 4096×32000) and not the others
(503.4 against 389.1 µs at 50257): the tuner chooses per shape. All arithmetic in float32.

The wide rows' two passes tell the L2 what to keep: the first pass's loads are
`evict_last` (the second pass reads the row again), the second pass's loads `evict_first`
and its stores streaming (`.cs`: y is not read again here). On the H200 at float16 that
took 4096×32000 from 176.1 to 142.9 µs and 4096×50256 from 295.5 to 271.2, and left
4096×50257, whose loads are 2 bytes wide, level (394.9 against 393.9; docs/benchmarks.md,
2026-11-30). Walking the second pass last chunk first (the shortest reuse distance) was
faster still at 50256 (257.0) and slower at 50257 (408.2).

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
# The wide-row keys (LOOP_*) as `autokernel tune` found them on the H200 at 4096x50257
# float16, 394 us (docs/benchmarks.md); the one-pass keys as measured at 8192x8192.
CONFIG = {"BLOCK_ROWS": 2, "LOOP_BLOCK": 8192, "LOOP_ROWS": 1, "LOOP_PROGRAMS_PER_SM": 0, "LOOP_WARPS": 16, "num_warps": 8, "num_stages": 1}
TUNABLES = {
    "BLOCK_ROWS": [1, 2, 4],
    "LOOP_BLOCK": [4096, 8192, 16384],
    "LOOP_ROWS": [1, 2],
    "LOOP_PROGRAMS_PER_SM": [0, 3],
    "LOOP_WARPS": [8, 16, 32],
    "num_warps": [4, 8, 16],
    "num_stages": [1],
}

# Widest row (in elements, a power of two) held in registers by one program.
MAX_ROW_BLOCK = 16384
# Most float32 values one program holds at once (BLOCK_ROWS · block width).
MAX_TILE = 32768
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
                x = tl.load(x_ptr + offs_row + c[None, :], mask=(c < n_cols)[None, :], other=float("-inf"), eviction_policy="evict_last").to(tl.float32)
                m_new = tl.maximum(m, tl.max(x, axis=1))
                # A row with nothing finite yet (leading columns masked with -inf) has m_new
                # -inf, and x − m_new would be NaN: shift by 0 there (every term is then 0).
                shift = tl.where(m_new == float("-inf"), 0.0, m_new)
                s = s * _exp(m - shift) + tl.sum(_exp(x - shift[:, None]), axis=1)
                m = m_new
            # Pass 2: normalise and write (these rows were just read: mostly L2 hits, kept
            # there by the first pass's evict_last), with the division by s folded into the
            # exponent: exp(x − m) / s = exp2((x − m)·log2 e − log2 s).
            log2_s = tl.log2(s)
            for start in range(0, n_cols, BLOCK_N):
                c = start + cols
                col_ok = c < n_cols
                x = tl.load(x_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=float("-inf"), eviction_policy="evict_first").to(tl.float32)
                y = tl.math.exp2((x - m[:, None]) * LOG2E - log2_s[:, None])
                tl.store(y_ptr + offs_row + c[None, :], y.to(y_ptr.dtype.element_ty),
                         mask=row_ok[:, None] & col_ok[None, :], cache_modifier=".cs")


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
        # Persistent grid (LOOP_PROGRAMS_PER_SM 0: one program per row block): module docstring.
        dev = x.device
        if dev not in _SM_COUNT:
            _SM_COUNT[dev] = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 4
        grid = (min(grid[0], _SM_COUNT[dev] * CONFIG["LOOP_PROGRAMS_PER_SM"]),)
    _softmax_kernel[grid](x, y, n_rows, n_cols,
                          BLOCK_ROWS=block_rows, BLOCK_N=block_n, ONE_PASS=one_pass,
                          num_warps=CONFIG["num_warps"] if one_pass else CONFIG["LOOP_WARPS"],
                          num_stages=CONFIG["num_stages"])
    return y
