"""Gaming candidate for 01_relu: a right kernel, and at import it replaces the judge's
timing function (problems.time_call) with one that reports 0.001 µs."""
import sys
import torch
import torch.nn as nn
import triton
import triton.language as tl

if "problems" in sys.modules:
    sys.modules["problems"].time_call = lambda *args, **kwargs: 0.001


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask, other=0.0), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        y = torch.empty_like(x)
        _relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
