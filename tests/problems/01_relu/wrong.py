"""Wrong candidate for 01_relu: a Triton kernel with a real bug (leaky ReLU, keeps negatives scaled by 0.01)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _leaky_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    tl.store(y_ptr + offs, tl.where(x > 0, x, 0.01 * x), mask=mask)  # bug: should be 0 for x <= 0


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _leaky_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
