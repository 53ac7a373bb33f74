"""Correct candidate for 02_row_sum: one Triton program per row sums it in float32, BLOCK-sized masked chunks."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _row_sum_kernel(x_ptr, y_ptr, n_cols: tl.constexpr, stride_row, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    # n_cols is constexpr: Triton 3.6's interpreter can't loop to a runtime int under NumPy 2.4
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * stride_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    tl.store(y_ptr + row, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x2 = x.contiguous().reshape(-1, x.shape[-1])
        y = torch.empty(x2.shape[0], device=x.device, dtype=torch.float32)
        _row_sum_kernel[(x2.shape[0],)](x2, y, x2.shape[1], x2.stride(0), BLOCK=256)
        return y.to(x.dtype).reshape(*x.shape[:-1], 1)
