"""Variant of the softmax starter for rows that start off a 16-byte boundary (an odd
vocabulary, 50257): softmax_aligned.py's 16-byte-aligned chunks (unmasked inside the row,
masked at its two ends) with the starter's exp2 exponentials and persistent grid (3
programs per SM, 8192-column chunks). Its inner loops issue 8.0 + 5.2 SASS instructions
per element at 50257 columns against the starter's 12.8 + 12.9 (benches/gpu/sass_probe.py
style count, Triton 3.6, sm_90). On the H200 slower than the starter (582.0 against
415.4 µs at 4096×50257; docs/benchmarks.md, "Timed on the GPU"). Nsight Compute
(session 6) gives the cause: 194 registers a thread (107 at 16 warps), 12% occupancy; with
a register cap (`maxnreg`) it runs level with the starter at 50257 and slower at the
aligned widths (docs/benchmarks.md, session 6).
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "softmax"
CONFIG = {"BLOCK_ROWS": 2, "LOOP_BLOCK": 8192, "PROGRAMS_PER_SM": 3, "num_warps": 8, "num_stages": 1}
TUNABLES = {"BLOCK_ROWS": [1, 2, 4], "LOOP_BLOCK": [4096, 8192], "PROGRAMS_PER_SM": [0, 3],
            "num_warps": [4, 8, 16], "num_stages": [1]}
LOG2E = tl.constexpr(1.4426950408889634)  # log2(e): exp(v) = exp2(v · log2 e)
MAX_ROW_BLOCK = 16384
MAX_TILE = 32768
_SM_COUNT = {}


@triton.jit
def _exp(v):
    """exp(v) as exp2(v · log2 e): one ex2.approx.ftz (the starter's docstring says why)."""
    return tl.math.exp2(v * LOG2E)


@triton.jit
def _one_pass_kernel(x_ptr, y_ptr, n_rows, n_cols, BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr):
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n_rows
    offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
    col_ok = cols < n_cols
    x = tl.load(x_ptr + offs_row + cols[None, :], mask=col_ok[None, :], other=float("-inf")).to(tl.float32)
    e = _exp(x - tl.max(x, axis=1)[:, None])
    y = e * (1.0 / tl.sum(e, axis=1))[:, None]
    tl.store(y_ptr + offs_row + cols[None, :], y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _chunk(x_ptr, base, j, head, end, n_total, EDGE: tl.constexpr):
    """The row's lanes j (relative to the aligned base) in float32; lanes outside the row -inf."""
    idx = base + j
    if EDGE:
        x = tl.load(x_ptr + idx, mask=idx < n_total, other=float("-inf")).to(tl.float32)
        return tl.where((j >= head) & (j < end), x, float("-inf"))
    else:
        return tl.load(x_ptr + idx).to(tl.float32)


@triton.jit
def _wide_kernel(x_ptr, y_ptr, n_rows, n_cols, n_total, BLOCK_N: tl.constexpr, ALIGN: tl.constexpr):
    cols = tl.arange(0, BLOCK_N)
    for row in range(tl.program_id(0), n_rows, tl.num_programs(0)):
        row_start = (tl.zeros([], tl.int64) + row) * n_cols  # int64: rows · cols may pass 2³¹
        base = tl.multiple_of(row_start // ALIGN * ALIGN, ALIGN)
        head = (row_start - base).to(tl.int32)
        end = head + n_cols
        last = (end - 1) // BLOCK_N  # the last chunk; chunks 1 .. last-1 lie inside the row
        x = _chunk(x_ptr, base, cols, head, end, n_total, True)
        m = tl.max(x, axis=0)
        s = tl.sum(_exp(x - m), axis=0)
        for k in range(1, last):
            x = _chunk(x_ptr, base, k * BLOCK_N + cols, head, end, n_total, False)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * _exp(m - m_new) + tl.sum(_exp(x - m_new), axis=0)
            m = m_new
        if last > 0:
            x = _chunk(x_ptr, base, last * BLOCK_N + cols, head, end, n_total, True)
            m_new = tl.maximum(m, tl.max(x, axis=0))
            s = s * _exp(m - m_new) + tl.sum(_exp(x - m_new), axis=0)
            m = m_new
        log2_s = tl.log2(s)  # 1/s folded into the exponent, as in the starter
        x = _chunk(x_ptr, base, cols, head, end, n_total, True)
        tl.store(y_ptr + base + cols, tl.math.exp2((x - m) * LOG2E - log2_s).to(y_ptr.dtype.element_ty),
                 mask=(cols >= head) & (cols < end))
        for k in range(1, last):
            j = k * BLOCK_N + cols
            x = _chunk(x_ptr, base, j, head, end, n_total, False)
            tl.store(y_ptr + base + j, tl.math.exp2((x - m) * LOG2E - log2_s).to(y_ptr.dtype.element_ty))
        if last > 0:
            j = last * BLOCK_N + cols
            x = _chunk(x_ptr, base, j, head, end, n_total, True)
            tl.store(y_ptr + base + j, tl.math.exp2((x - m) * LOG2E - log2_s).to(y_ptr.dtype.element_ty), mask=j < end)


def kernel_fn(x):
    """x [rows, cols] → softmax over the last dim, in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    full = triton.next_power_of_2(n_cols)
    if full <= MAX_ROW_BLOCK:
        block_rows = max(1, min(CONFIG["BLOCK_ROWS"], MAX_TILE // full))
        _one_pass_kernel[(triton.cdiv(n_rows, block_rows),)](
            x, y, n_rows, n_cols, BLOCK_ROWS=block_rows, BLOCK_N=full,
            num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
        return y
    programs = n_rows
    if CONFIG["PROGRAMS_PER_SM"] > 0:
        dev = x.device
        if dev not in _SM_COUNT:
            _SM_COUNT[dev] = torch.cuda.get_device_properties(dev).multi_processor_count if dev.type == "cuda" else 4
        programs = min(n_rows, _SM_COUNT[dev] * CONFIG["PROGRAMS_PER_SM"])
    _wide_kernel[(programs,)](x, y, n_rows, n_cols, x.numel(), BLOCK_N=CONFIG["LOOP_BLOCK"],
                              ALIGN=max(1, 16 // x.element_size()),
                              num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return y
