"""Starts a daemon at import: a grandchild in a session of its own (`setsid`, then a second
fork) running `sleep @MARKER@`, meant to outlive the evaluation; computes a right answer."""
import os
import torch
import triton
import triton.language as tl
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

_pid = os.fork()
if _pid == 0:
    try:
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", "@MARKER@"])
    finally:
        os._exit(0)
os.waitpid(_pid, 0)


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def _softmax(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y


def kernel_fn(x):
    return _softmax(x)
