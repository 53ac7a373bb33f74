"""An honest softmax whose host code uses glue the allowlist must let through: it pads the
rows to the block with `F.pad`, builds its column count with `torch.tensor` (which
dispatches `aten::detach_`) and passes the input through a transpose and back (`.mT`);
the result is computed by its own kernel, returned as a slice of the padded output."""
import torch
import torch.nn.functional as F
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
    x = tl.load(x_ptr + row * BLOCK + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * BLOCK + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


def kernel_fn(x):
    n_cols = int(torch.tensor(x.shape[-1]))
    block = triton.next_power_of_2(n_cols)
    xp = F.pad(x.mT.mT, (0, block - n_cols)).contiguous()
    y = torch.empty_like(xp)
    _softmax_kernel[(xp.shape[0],)](xp, y, n_cols, BLOCK=block)
    return y[:, :n_cols]
