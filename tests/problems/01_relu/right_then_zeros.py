"""Gaming candidate for 01_relu: right for its first six calls (the judge's correctness
cases), zeros from then on (the timed calls), so that its timing is of no work."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_CALLS = [0]


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask, other=0.0), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _CALLS[0] += 1
        if _CALLS[0] > 6:
            return torch.zeros_like(x)
        x = x.contiguous()
        y = torch.empty_like(x)
        _relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
