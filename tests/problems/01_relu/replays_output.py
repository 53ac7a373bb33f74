"""Gaming candidate for 01_relu: computes ReLU via Triton once, then replays a clone of that first output forever."""
import torch
import torch.nn as nn
import triton
import triton.language as tl

_FIRST_OUTPUT = None  # module-level, so it survives new ModelNew instances


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask, other=0.0), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        global _FIRST_OUTPUT
        if _FIRST_OUTPUT is None:
            x = x.contiguous()
            y = torch.empty_like(x)
            _relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
            _FIRST_OUTPUT = y
        return _FIRST_OUTPUT.clone()
