"""At import, writes 20 MiB without a newline on every pipe open for writing past fds 0-2
(the worker's private reply channel is one of them), then answers right."""
import fcntl
import os
import stat
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


def _softmax(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y



def _flood():
    junk = b"x" * (20 << 20)
    for name in os.listdir("/proc/self/fd"):
        fd = int(name)
        try:
            writable = fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_ACCMODE == os.O_WRONLY
            if fd > 2 and writable and stat.S_ISFIFO(os.fstat(fd).st_mode):
                os.write(fd, junk)
        except OSError:
            pass


_flood()


def kernel_fn(x):
    return _softmax(x)
