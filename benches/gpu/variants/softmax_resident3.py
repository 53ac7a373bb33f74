"""Variant of the softmax starter: rows wider than MAX_ROW_BLOCK whose 16-byte-aligned
span fits three power-of-two pieces of at most RESIDENT_LIMIT columns in all are read once
and held in registers by one program of RESIDENT_WARPS warps (`_resident_kernel`), as
16-bit values, the way PyTorch's softmax holds a row in shared memory. The earlier
register-resident variant (softmax_resident.py) padded the row to one power of two (65536
for 50257 columns: 64 values a thread at 32 warps) and spilled; three pieces cover 50257
columns in 51200 (50 a thread). The exponent of the sum and that of the store are written
differently so that the compiler cannot keep a float32 copy of the row between them.
Rows the pieces do not fit take the starter's loop. The starter's docstring follows.
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
def _resident_kernel(x_ptr, y_ptr, n_cols, n_total, ALIGN: tl.constexpr,
                     PIECE_A: tl.constexpr, PIECE_B: tl.constexpr, PIECE_C: tl.constexpr):
    """One row per program, read once into registers as three pieces of PIECE_A, PIECE_B
    and PIECE_C columns (powers of two) starting at the 16-byte boundary at or before the
    row, so that the loads are 16 bytes wide whatever the row's offset; lanes outside the
    row are masked out of the max, the sum and the store."""
    row_start = tl.program_id(0).to(tl.int64) * n_cols
    base = tl.multiple_of(row_start // ALIGN * ALIGN, ALIGN)
    head = (row_start - base).to(tl.int32)
    ja = tl.arange(0, PIECE_A)
    jb = PIECE_A + tl.arange(0, PIECE_B)
    jc = PIECE_A + PIECE_B + tl.arange(0, PIECE_C)
    in_a = (ja >= head) & (ja < head + n_cols)
    in_b = jb < head + n_cols
    in_c = jc < head + n_cols
    xa = tl.load(x_ptr + base + ja, mask=in_a, other=float("-inf"))
    xb = tl.load(x_ptr + base + jb, mask=in_b, other=float("-inf"))
    xc = tl.load(x_ptr + base + jc, mask=in_c & (base + jc < n_total), other=float("-inf"))
    m = tl.maximum(tl.maximum(tl.max(xa, axis=0), tl.max(xb, axis=0)), tl.max(xc, axis=0)).to(tl.float32)
    s = (tl.sum(_exp(xa.to(tl.float32) - m), axis=0) + tl.sum(_exp(xb.to(tl.float32) - m), axis=0)
         + tl.sum(_exp(xc.to(tl.float32) - m), axis=0))
    # exp(x − m) / s = exp2(x·log2 e − (m·log2 e + log2 s)): not the sum's expression.
    shift = m * LOG2E + tl.log2(s)
    out_ty = y_ptr.dtype.element_ty
    tl.store(y_ptr + base + ja, tl.math.exp2(xa.to(tl.float32) * LOG2E - shift).to(out_ty), mask=in_a)
    tl.store(y_ptr + base + jb, tl.math.exp2(xb.to(tl.float32) * LOG2E - shift).to(out_ty), mask=in_b)
    tl.store(y_ptr + base + jc, tl.math.exp2(xc.to(tl.float32) * LOG2E - shift).to(out_ty), mask=in_c)


def _pieces(width):
    """Three powers of two a ≥ b ≥ c (a < width ≤ a + b + c, or a ≥ width) covering `width`
    columns with the least padding three pieces allow, the last rounded up."""
    a = triton.next_power_of_2(width) // 2 or 1
    if a >= width:
        return a, 1, 1
    rest = width - a
    b = min(a, triton.next_power_of_2(rest) // 2 or 1)
    c = triton.next_power_of_2(max(rest - b, 1))
    return a, b, c


def kernel_fn(x):
    """x [rows, cols] → softmax over the last dim, in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    full = triton.next_power_of_2(n_cols)
    align = max(1, 16 // x.element_size())
    pa, pb, pc = _pieces(n_cols + align - 1)
    if full > MAX_ROW_BLOCK and pa + pb + pc <= RESIDENT_LIMIT and pc <= pb:
        _resident_kernel[(n_rows,)](x, y, n_cols, x.numel(), ALIGN=align, PIECE_A=pa, PIECE_B=pb, PIECE_C=pc,
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
