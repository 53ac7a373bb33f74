"""Residual add then layer normalisation over the last dim: h = x + residual (rounded to x's
dtype), y = (h − mean)/sqrt(var + eps)·w + b; out [2, rows, cols] holds h in out[0] and y in
out[1].

Parameters (keyword arguments of kernel_fn, the catalogue's defaults, as layernorm's):
`eps` (1e-5) and `has_bias` (true; without a bias the judge passes no `bias` tensor and
nothing is added).

Starter kernel of autokernel (kind `add_layernorm`). Memory-bound: one read of x and of
residual, one write of each half of out, in one launch. Each program handles BLOCK_ROWS
rows. A row of up to MAX_ROW_BLOCK columns is held in registers and its statistics
computed in two passes over the registers (mean, then the mean of squared deviations: no
cancellation, unlike E[h²] − E[h]²). A wider row is walked three times: the first pass
adds, stores h and sums it, the other two (variance, write) read h back from out[0]. The
norm is computed from h as stored, rounded to the dtype, as the model's half-precision add
leaves it. All arithmetic in float32; biased variance, as PyTorch.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "add_layernorm"
CONFIG = {"BLOCK_ROWS": 1, "num_warps": 8, "num_stages": 1}
TUNABLES = {
    "BLOCK_ROWS": [1, 2, 4, 8],
    "num_warps": [1, 2, 4, 8, 16],
    "num_stages": [1, 2],
}

EPS = 1e-5
# Widest row (in elements, a power of two) held in registers by one program.
MAX_ROW_BLOCK = 16384
# Most float32 values one program holds at once (BLOCK_ROWS · block width).
MAX_TILE = 32768


@triton.jit
def _add_layernorm_kernel(x_ptr, r_ptr, w_ptr, b_ptr, h_ptr, y_ptr, n_rows, n_cols, eps,
                          BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr,
                          HAS_BIAS: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n_rows
    # Rows past the end re-read the last row (no mask on the loads); not stored.
    offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
    cols = tl.arange(0, BLOCK_N)
    dtype = h_ptr.dtype.element_ty
    if ONE_PASS:
        col_ok = cols < n_cols
        x = tl.load(x_ptr + offs_row + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
        r = tl.load(r_ptr + offs_row + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
        h = (x + r).to(dtype)
        tl.store(h_ptr + offs_row + cols[None, :], h, mask=row_ok[:, None] & col_ok[None, :])
        # The norm sees h as stored.
        h = h.to(tl.float32)
        mean = tl.sum(h, axis=1) / n_cols
        hc = tl.where(col_ok[None, :], h - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(hc * hc, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        y = hc * rstd[:, None] * w[None, :]
        if HAS_BIAS:
            y += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + offs_row + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    else:
        acc = tl.zeros([BLOCK_ROWS, BLOCK_N], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            x = tl.load(x_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            r = tl.load(r_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            h = (x + r).to(dtype)
            tl.store(h_ptr + offs_row + c[None, :], h, mask=row_ok[:, None] & col_ok[None, :])
            acc += h.to(tl.float32)
        mean = tl.sum(acc, axis=1) / n_cols
        # The next passes read h back from out[0], written by other threads of this program.
        tl.debug_barrier()
        acc = tl.zeros([BLOCK_ROWS, BLOCK_N], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            h = tl.load(h_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            hc = tl.where(col_ok[None, :], h - mean[:, None], 0.0)
            acc += hc * hc
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            h = tl.load(h_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=col_ok, other=0.0).to(tl.float32)
            y = (h - mean[:, None]) * rstd[:, None] * w[None, :]
            if HAS_BIAS:
                y += tl.load(b_ptr + c, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            tl.store(y_ptr + offs_row + c[None, :], y.to(y_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & col_ok[None, :])


def kernel_fn(x, residual, weight, bias=None, eps=EPS, has_bias=True):
    """x [rows, cols], residual [rows, cols], weight [cols], bias [cols] (None when has_bias
    is false) → out [2, rows, cols] in x's dtype: out[0] = x + residual, out[1] its
    layernorm."""
    x = x.contiguous()
    residual = residual.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    out = torch.empty((2, *x.shape), dtype=x.dtype, device=x.device)
    block_n = min(triton.next_power_of_2(n_cols), MAX_ROW_BLOCK)
    block_rows = max(1, min(CONFIG["BLOCK_ROWS"], MAX_TILE // block_n))
    grid = (triton.cdiv(n_rows, block_rows),)
    has_bias = has_bias and bias is not None
    b = bias.contiguous() if has_bias else weight  # not read without a bias
    _add_layernorm_kernel[grid](x, residual, weight.contiguous(), b, out[0], out[1], n_rows, n_cols,
                                float(eps),
                                BLOCK_ROWS=block_rows, BLOCK_N=block_n, ONE_PASS=block_n >= n_cols,
                                HAS_BIAS=has_bias,
                                num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return out
