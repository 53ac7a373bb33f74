"""Honest candidate for 01_relu that keeps one output tensor and writes every call's answer
into it (a preallocated buffer, as a CUDA graph would): each returned tensor is the same
object, overwritten by the next call. It must PASS."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask, other=0.0), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.out = None

    def forward(self, x):
        x = x.contiguous()
        if self.out is None or self.out.shape != x.shape or self.out.device != x.device:
            self.out = torch.empty_like(x)
        _relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, self.out, x.numel(), BLOCK=1024)
        return self.out
