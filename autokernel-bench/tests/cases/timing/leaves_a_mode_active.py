"""In its first timed call (under the op monitor's `call` and not under `run_case`) it
enters a torch function mode and leaves it active: a mode intercepts every torch call,
the judge's between the timed calls included (where the inputs are rotated and the
outputs copied), so a candidate could compute a checked output there, untimed. Its
answers are right."""
import sys

import torch
import triton
import triton.language as tl
from torch.overrides import TorchFunctionMode
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

_MODE = []


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


class _Watch(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        return func(*args, **(kwargs or {}))


def _timed():
    under_call = False
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_name
        if name == "run_case":
            return False
        under_call = under_call or name == "call"
        f = f.f_back
    return under_call


def kernel_fn(x):
    if _timed() and not _MODE:
        mode = _Watch()
        mode.__enter__()
        _MODE.append(mode)
    x = x.contiguous()
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y
