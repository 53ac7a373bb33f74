"""Correct candidate for 08_residual_rmsnorm: residual add + RMSNorm * weight fused, one Triton program per row."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _residual_rmsnorm_kernel(x_ptr, r_ptr, w_ptr, y_ptr, n_cols, stride_row, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + row * stride_row + cols, mask=mask, other=0.0).to(tl.float32)
    h = x + r
    rstd = 1.0 / tl.sqrt(tl.sum(h * h, axis=0) / n_cols + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * stride_row + cols, h * rstd * w, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden_size, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(hidden_size))
        self.eps = eps

    def forward(self, x, residual):
        x2 = x.contiguous().reshape(-1, x.shape[-1])
        r2 = residual.contiguous().reshape(-1, x.shape[-1])
        y = torch.empty_like(x2)
        n_cols = x2.shape[1]
        _residual_rmsnorm_kernel[(x2.shape[0],)](x2, r2, self.weight, y, n_cols, x2.stride(0),
                                                 float(self.eps), BLOCK=triton.next_power_of_2(n_cols))
        return y.reshape(x.shape)
