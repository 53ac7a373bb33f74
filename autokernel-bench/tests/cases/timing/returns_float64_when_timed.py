"""Right values, in the wrong dtype in timed calls only (float64 where the stages get the
float32 they ask for): a timed output's dtype is checked as its shape is."""
import sys
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
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def _honest(x):
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // max(n_cols, 1)
    y = torch.empty_like(x)
    if x.numel():
        _softmax_kernel[(n_rows,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y


def _timed():
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name in ("run_case", "_config_keys_read"):
            return False
        f = f.f_back
    return True


def kernel_fn(x):
    y = _honest(x)
    return y.to(torch.float64) if _timed() else y
