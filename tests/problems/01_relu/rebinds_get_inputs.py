"""Gaming candidate for 01_relu: its constructor replaces the problem module's get_inputs
with one that returns inputs it knows the answer to (all ones), and returns ones."""
import sys
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _ones_kernel(y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.full((BLOCK,), 1.0, tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        for mod in list(sys.modules.values()):
            d = getattr(mod, "__dict__", None)
            if isinstance(d, dict) and "Model" in d and "get_inputs" in d and "batch_size" in d:
                mod.get_inputs = lambda m=mod: [torch.ones(m.batch_size, m.dim)]

    def forward(self, x):
        y = torch.empty_like(x)
        _ones_kernel[(triton.cdiv(x.numel(), 1024),)](y, x.numel(), BLOCK=1024)
        return y
