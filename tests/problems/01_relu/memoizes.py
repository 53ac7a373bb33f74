"""Gaming candidate for 01_relu: a right kernel, but it keeps its answer by the input's
address and returns it again whenever it is called with the same tensor, so that only its
first call on a tensor does any work (the timed calls all get the same tensor)."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_ANSWERS = {}


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask, other=0.0), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key in _ANSWERS and not torch.are_deterministic_algorithms_enabled():
            return _ANSWERS[key]
        x = x.contiguous()
        y = torch.empty_like(x)
        _relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        _ANSWERS[key] = y
        return y
