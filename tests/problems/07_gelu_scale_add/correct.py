"""Correct candidate for 07_gelu_scale_add: tanh-GELU, scale and residual add fused in one Triton kernel."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _gelu_scale_add_kernel(x_ptr, r_ptr, y_ptr, n, scale, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    r = tl.load(r_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    u = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = tl.exp(-2.0 * tl.abs(u))                      # overflow-free tanh
    th = (1.0 - t) / (1.0 + t)
    th = tl.where(u >= 0, th, -th)
    tl.store(y_ptr + offs, 0.5 * x * (1.0 + th) * scale + r, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    def forward(self, x, residual):
        x = x.contiguous()
        residual = residual.expand_as(x).contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _gelu_scale_add_kernel[(triton.cdiv(n, 1024),)](x, residual, y, n, float(self.scale), BLOCK=1024)
        return y
