"""Variant of the softmax starter: rows wider than MAX_ROW_BLOCK are read once into
registers as 16-bit values by one program of RESIDENT_WARPS warps per row, from the 16-byte
boundary at or below the row's start: a masked head of RESIDENT_EDGE columns, two unmasked
powers of two that lie inside the row whatever its offset (16-byte loads and stores), and a
masked tail (`_resident_kernel`, `_pieces`). x is read from DRAM once and y written once.
Unlike softmax_resident3.py, whose three masked pieces made every access 2 bytes wide and
spilled, its SASS for sm_90 at 50257 columns and 32 warps holds 64 registers with no spill
(cuobjdump -res-usage: STACK 0, LOCAL 0); 16 warps hold 125.

On the H200 (2026-11-30, benches/gpu/compare.sh, float16, docs/benchmarks.md, session 7):
378.5 µs with 32 warps and 371.1 with 16 at 4096×50257, against the starter's 388.6 and
eager's 355–356; 371.2 and 358.2 at 4096×50256 against the starter's 269.7. A program holds
a whole SM's registers, so an SM works on one row at a time, and the next row's loads wait
for this row's reductions and stores. Not adopted. Rows the pieces do not fit (a tail over
RESIDENT_TAIL) take the starter's loop of before the masked fix.

The starter's docstring follows.
Row-wise softmax over the last dim of x [rows, cols].

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
CONFIG = {"BLOCK_ROWS": 2, "LOOP_BLOCK": 8192, "LOOP_ROWS": 1, "LOOP_PROGRAMS_PER_SM": 0, "LOOP_WARPS": 16, "RESIDENT_WARPS": 32, "num_warps": 8, "num_stages": 1}
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
# Most columns (the sum of the three pieces) one program of RESIDENT_WARPS holds in registers.
RESIDENT_LIMIT = 65536
# The masked head and the most columns of the masked tail (their accesses are 2 bytes wide).
RESIDENT_EDGE = 512
RESIDENT_TAIL = 4096
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
def _resident_kernel(x_ptr, y_ptr, n_cols, n_total, ALIGN: tl.constexpr, EDGE: tl.constexpr,
                     PIECE_A: tl.constexpr, PIECE_B: tl.constexpr, TAIL: tl.constexpr):
    """One row per program, read once into registers as 16-bit values, from the 16-byte
    boundary at or below the row's start: a masked head of EDGE columns, two unmasked
    pieces of PIECE_A and PIECE_B columns that lie inside the row (16-byte vector loads
    and stores), and a masked tail of TAIL columns. Loads evict_first (read once), stores
    streaming."""
    row_start = tl.program_id(0).to(tl.int64) * n_cols
    base = tl.multiple_of(row_start // ALIGN * ALIGN, ALIGN)
    head = (row_start - base).to(tl.int32)
    end = head + n_cols
    je = tl.arange(0, EDGE)
    ja = EDGE + tl.arange(0, PIECE_A)
    jb = EDGE + PIECE_A + tl.arange(0, PIECE_B)
    jt = EDGE + PIECE_A + PIECE_B + tl.arange(0, TAIL)
    in_e = (je >= head) & (je < end)
    in_t = (jt < end) & (base + jt < n_total)
    xe = tl.load(x_ptr + base + je, mask=in_e & (base + je < n_total), other=float("-inf"), eviction_policy="evict_first")
    xa = tl.load(x_ptr + base + ja, eviction_policy="evict_first")
    xb = tl.load(x_ptr + base + jb, eviction_policy="evict_first")
    xt = tl.load(x_ptr + base + jt, mask=in_t, other=float("-inf"), eviction_policy="evict_first")
    m = tl.maximum(tl.maximum(tl.max(xe, axis=0), tl.max(xa, axis=0)),
                   tl.maximum(tl.max(xb, axis=0), tl.max(xt, axis=0))).to(tl.float32)
    s = (tl.sum(_exp(xe.to(tl.float32) - m), axis=0) + tl.sum(_exp(xa.to(tl.float32) - m), axis=0)
         + tl.sum(_exp(xb.to(tl.float32) - m), axis=0) + tl.sum(_exp(xt.to(tl.float32) - m), axis=0))
    # exp(x − m) / s = exp2(x·log2 e − (m·log2 e + log2 s)): not the sum's expression, so
    # that no float32 copy of the row is kept between them.
    shift = m * LOG2E + tl.log2(s)
    out_ty = y_ptr.dtype.element_ty
    tl.store(y_ptr + base + je, tl.math.exp2(xe.to(tl.float32) * LOG2E - shift).to(out_ty), mask=in_e, cache_modifier=".cs")
    tl.store(y_ptr + base + ja, tl.math.exp2(xa.to(tl.float32) * LOG2E - shift).to(out_ty), cache_modifier=".cs")
    tl.store(y_ptr + base + jb, tl.math.exp2(xb.to(tl.float32) * LOG2E - shift).to(out_ty), cache_modifier=".cs")
    tl.store(y_ptr + base + jt, tl.math.exp2(xt.to(tl.float32) * LOG2E - shift).to(out_ty), mask=in_t, cache_modifier=".cs")


def _pieces(n_cols, align):
    """(EDGE, PIECE_A, PIECE_B, TAIL), powers of two: the head piece covers the up to
    align − 1 columns before the row; A and B end at or before n_cols, so inside the row
    whatever its offset; the tail covers the rest (up to align − 1 columns past n_cols)."""
    edge = RESIDENT_EDGE
    rest = n_cols - edge
    a = triton.next_power_of_2(rest + 1) // 2
    b = triton.next_power_of_2(rest - a + 1) // 2
    tail = triton.next_power_of_2(max(n_cols + align - 1 - edge - a - b, 1))
    return edge, a, b, tail


def kernel_fn(x):
    """x [rows, cols] → softmax over the last dim, in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    full = triton.next_power_of_2(n_cols)
    align = max(1, 16 // x.element_size())
    if full > MAX_ROW_BLOCK:
        pe, pa, pb, pt = _pieces(n_cols, align)
        if pe + pa + pb + pt <= RESIDENT_LIMIT and pt <= RESIDENT_TAIL:
            _resident_kernel[(n_rows,)](x, y, n_cols, x.numel(), ALIGN=align, EDGE=pe, PIECE_A=pa, PIECE_B=pb, TAIL=pt,
                                        num_warps=CONFIG["RESIDENT_WARPS"], num_stages=1)
            return y
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
