"""Residual add then RMSNorm over the last dim: h = x + residual (rounded to x's dtype),
y = h / sqrt(mean(h²) + eps) · (w + weight_offset); out [2, rows, cols] holds h in out[0]
and y in out[1].

Parameters (keyword arguments of kernel_fn, the catalogue's defaults, as rmsnorm's): `eps`
(1e-6), `weight_offset` (0; 1 for Gemma's ĥ · (1 + w)) and `cast_order` ("float32": one
rounding at the end; "llama"/"t5": ĥ and w + weight_offset rounded to x's dtype before the
product, as LlamaRMSNorm and T5LayerNorm do when x and w share a dtype).

Starter kernel of autokernel (kind `add_rmsnorm`). Memory-bound: one read of x and of
residual, one write of each half of out, in one launch. Each program normalises BLOCK_ROWS
rows. A row of up to MAX_ROW_BLOCK columns is held in registers; a wider row is walked
twice: the first pass adds, stores h and sums its squares, the second reads h back from
out[0] (one read instead of x and residual again) and normalises. The norm is computed
from h as stored, rounded to the dtype, as the model's half-precision add leaves it.
Statistics are computed in float32 whatever the input dtype, so float16 rows near 3e4
(whose squares overflow float16) are exact enough.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "add_rmsnorm"
CONFIG = {"BLOCK_ROWS": 2, "num_warps": 8, "num_stages": 1}
TUNABLES = {
    "BLOCK_ROWS": [1, 2, 4, 8],
    "num_warps": [1, 2, 4, 8, 16],
    "num_stages": [1, 2],
}

EPS = 1e-6
# Widest row (in elements, a power of two) kept in registers by one program.
MAX_ROW_BLOCK = 16384
# Most float32 values one program holds at once (BLOCK_ROWS · block width).
MAX_TILE = 32768


@triton.jit
def _scale(h, w, dtype: tl.constexpr, ROUND_FIRST: tl.constexpr):
    """h [rows, cols] · w [cols] in float32; with ROUND_FIRST both rounded to `dtype` first."""
    if ROUND_FIRST:
        h = h.to(dtype).to(tl.float32)
        w = w.to(dtype).to(tl.float32)
    return h * w[None, :]


@triton.jit
def _add_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, h_ptr, y_ptr, n_rows, n_cols, eps, w_offset,
                        BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr,
                        ROUND_FIRST: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n_rows
    # Rows past the end re-read the last row (no NaN, no mask on the loads); not stored.
    offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
    cols = tl.arange(0, BLOCK_N)
    dtype = h_ptr.dtype.element_ty
    if ONE_PASS:
        col_ok = cols < n_cols
        x = tl.load(x_ptr + offs_row + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
        r = tl.load(r_ptr + offs_row + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
        h = (x + r).to(dtype)
        tl.store(h_ptr + offs_row + cols[None, :], h, mask=row_ok[:, None] & col_ok[None, :])
        # The norm sees h as stored (padded columns are 0 + 0: they add nothing to the sum).
        h = h.to(tl.float32)
        rstd = tl.rsqrt(tl.sum(h * h, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        y = _scale(h * rstd[:, None], w + w_offset, dtype, ROUND_FIRST)
        tl.store(y_ptr + offs_row + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    else:
        acc = tl.zeros([BLOCK_ROWS, BLOCK_N], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            x = tl.load(x_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            r = tl.load(r_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            h = (x + r).to(dtype)
            tl.store(h_ptr + offs_row + c[None, :], h, mask=row_ok[:, None] & col_ok[None, :])
            h = h.to(tl.float32)
            acc += h * h
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        # The second pass reads h back from out[0], written by other threads of this program.
        tl.debug_barrier()
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            h = tl.load(h_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=col_ok, other=0.0).to(tl.float32)
            y = _scale(h * rstd[:, None], w + w_offset, dtype, ROUND_FIRST)
            tl.store(y_ptr + offs_row + c[None, :], y.to(y_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & col_ok[None, :])


def kernel_fn(x, residual, weight, eps=EPS, weight_offset=0, cast_order="float32"):
    """x [rows, cols], residual [rows, cols], weight [cols] → out [2, rows, cols] in x's
    dtype: out[0] = x + residual, out[1] its RMSNorm (parameters: the module docstring)."""
    x = x.contiguous()
    residual = residual.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    out = torch.empty((2, *x.shape), dtype=x.dtype, device=x.device)
    block_n = min(triton.next_power_of_2(n_cols), MAX_ROW_BLOCK)
    block_rows = max(1, min(CONFIG["BLOCK_ROWS"], MAX_TILE // block_n))
    grid = (triton.cdiv(n_rows, block_rows),)
    _add_rmsnorm_kernel[grid](x, residual, weight.contiguous(), out[0], out[1], n_rows, n_cols,
                              float(eps), float(weight_offset),
                              BLOCK_ROWS=block_rows, BLOCK_N=block_n, ONE_PASS=block_n >= n_cols,
                              ROUND_FIRST=cast_order != "float32",
                              num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return out
