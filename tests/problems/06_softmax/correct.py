"""Correct candidate for 06_softmax: one Triton program per row, max-subtracted exp, normalised."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * stride_row + cols, e / tl.sum(e, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x2 = x.contiguous().reshape(-1, x.shape[-1])
        y = torch.empty_like(x2)
        n_cols = x2.shape[1]
        _softmax_kernel[(x2.shape[0],)](x2, y, n_cols, x2.stride(0), BLOCK=triton.next_power_of_2(n_cols))
        return y.reshape(x.shape)
