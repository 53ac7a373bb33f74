"""Correct candidate for 09_mse_loss: a single Triton program accumulates (pred - target)^2 in float32 and divides by n."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _mse_kernel(p_ptr, t_ptr, out_ptr, n: tl.constexpr, BLOCK: tl.constexpr):
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    # n is constexpr: Triton 3.6's interpreter can't loop to a runtime int under NumPy 2.4
    for start in range(0, n, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < n
        d = tl.load(p_ptr + offs, mask=mask, other=0.0).to(tl.float32) \
            - tl.load(t_ptr + offs, mask=mask, other=0.0).to(tl.float32)
        acc += d * d
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, pred, target):
        pred = pred.contiguous()
        target = target.contiguous()
        out = torch.empty((), device=pred.device, dtype=torch.float32)
        _mse_kernel[(1,)](pred, target, out, pred.numel(), BLOCK=1024)
        return out
