"""Appends a forged row to a file it does not own (@TARGET@, standing for the workspace's
results.tsv) and creates a file beside it, at import; computes a right answer otherwise."""
import torch
import triton
import triton.language as tl
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

for path, mode in (("@TARGET@", "a"), ("@TARGET@.planted", "w")):
    try:
        with open(path, mode) as f:
            f.write("99\t2026-12-01T00:00:00Z\tsoftmax\tsoftmax\tforged\ttuner\tdeadbeef\tkeep\tPASS\n")
    except OSError:
        pass


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
