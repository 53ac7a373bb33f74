"""Honest: its own Triton kernel computes the softmax in float32; around it, in every call,
torch glue that moves or describes data only: `arange` and a scalar of it read back with
`.item()`, `cat`,
`contiguous`, a cast, `zeros_like`, `flip` there and back. On the GPU each is a copy, a
fill, a flip or a few bytes to the host, which the device's record allows."""
import torch
import triton
import triton.language as tl

KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


def kernel_fn(x):
    n = int(torch.arange(x.shape[-1], device=x.device)[-1].item()) + 1
    rows = x.reshape(-1, n)
    x32 = torch.cat([rows[:1], rows[1:]], 0).contiguous().to(torch.float32)
    y = torch.zeros_like(x32)
    _softmax_kernel[(x32.shape[0],)](x32, y, n, BLOCK=triton.next_power_of_2(n))
    return y.flip(0).flip(0).to(x.dtype).view(x.shape)
