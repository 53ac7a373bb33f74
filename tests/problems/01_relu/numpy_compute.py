"""Gaming candidate for 01_relu: computes the ReLU in NumPy and copies the answer into the
output with a Triton kernel, so that a kernel of its own does launch."""
import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        answer = torch.from_numpy(np.maximum(x.detach().cpu().numpy(), 0.0)).to(x.device)
        y = torch.empty_like(x)
        _copy_kernel[(triton.cdiv(x.numel(), 1024),)](answer, y, x.numel(), BLOCK=1024)
        return y
