"""Layer normalisation over the last dim of x [rows, cols]: (x − mean)/sqrt(var + eps)·w + b.

Parameters (keyword arguments of kernel_fn, the catalogue's defaults): `eps` (1e-5) and
`has_bias` (true; without a bias the judge passes no `bias` tensor and nothing is added).

Starter kernel of autokernel (kind `layernorm`). Memory-bound: one read, one write. Each
program handles BLOCK_ROWS rows. A row of up to MAX_ROW_BLOCK columns is held in registers
and its statistics computed in two passes over the registers (mean, then the mean of
squared deviations: no cancellation, unlike E[x²] − E[x]²). A wider row is read three
times (mean, variance, write). All arithmetic in float32; biased variance, as PyTorch.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "layernorm"
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
def _layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_rows, n_cols, eps,
                      BLOCK_ROWS: tl.constexpr, BLOCK_N: tl.constexpr, ONE_PASS: tl.constexpr,
                      HAS_BIAS: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n_rows
    # Rows past the end re-read the last row (no mask on the loads); not stored.
    offs_row = tl.minimum(rows, n_rows - 1).to(tl.int64)[:, None] * n_cols
    cols = tl.arange(0, BLOCK_N)
    if ONE_PASS:
        col_ok = cols < n_cols
        x = tl.load(x_ptr + offs_row + cols[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / n_cols
        xc = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
        rstd = tl.rsqrt(tl.sum(xc * xc, axis=1) / n_cols + eps)
        w = tl.load(w_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)
        y = xc * rstd[:, None] * w[None, :]
        if HAS_BIAS:
            y += tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
        tl.store(y_ptr + offs_row + cols[None, :], y.to(y_ptr.dtype.element_ty),
                 mask=row_ok[:, None] & col_ok[None, :])
    else:
        acc = tl.zeros([BLOCK_ROWS, BLOCK_N], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            acc += tl.load(x_ptr + offs_row + c[None, :], mask=(c < n_cols)[None, :], other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=1) / n_cols
        acc = tl.zeros([BLOCK_ROWS, BLOCK_N], tl.float32)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            x = tl.load(x_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            xc = tl.where(col_ok[None, :], x - mean[:, None], 0.0)
            acc += xc * xc
        rstd = tl.rsqrt(tl.sum(acc, axis=1) / n_cols + eps)
        for start in range(0, n_cols, BLOCK_N):
            c = start + cols
            col_ok = c < n_cols
            x = tl.load(x_ptr + offs_row + c[None, :], mask=col_ok[None, :], other=0.0).to(tl.float32)
            w = tl.load(w_ptr + c, mask=col_ok, other=0.0).to(tl.float32)
            y = (x - mean[:, None]) * rstd[:, None] * w[None, :]
            if HAS_BIAS:
                y += tl.load(b_ptr + c, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            tl.store(y_ptr + offs_row + c[None, :], y.to(y_ptr.dtype.element_ty),
                     mask=row_ok[:, None] & col_ok[None, :])


def kernel_fn(x, weight, bias=None, eps=EPS, has_bias=True):
    """x [rows, cols], weight [cols], bias [cols] (None when has_bias is false) → y [rows,
    cols] in x's dtype."""
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    y = torch.empty_like(x)
    block_n = min(triton.next_power_of_2(n_cols), MAX_ROW_BLOCK)
    block_rows = max(1, min(CONFIG["BLOCK_ROWS"], MAX_TILE // block_n))
    grid = (triton.cdiv(n_rows, block_rows),)
    has_bias = has_bias and bias is not None
    b = bias.contiguous() if has_bias else weight  # not read without a bias
    _layernorm_kernel[grid](x, weight.contiguous(), b, y, n_rows, n_cols, float(eps),
                            BLOCK_ROWS=block_rows, BLOCK_N=block_n, ONE_PASS=block_n >= n_cols,
                            HAS_BIAS=has_bias,
                            num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return y
