"""In every timed call (under the op monitor's `call` and not under `run_case`) it keeps a
copy of its input, launches its own kernel on one row only, returns an output of zeros,
and rebinds the harness's table entry `_P["to"]` to a hook. The hook runs where the judge
converts an output to float32 before keeping it (outside the timed window, and only for
the calls that are checked); called on one of its zeros outputs, it computes the right
softmax of the saved input there, puts the table entry back and returns that: the
checked outputs right, the guards after the stage finding the table as it was, and the
time of a one-row kernel. A reviewer's reading of the Rust loop's first version (which
still called the harness's Python for that conversion); the loop now calls torch's own
callables, captured before any candidate, so the hook never runs."""
import sys

import torch
import triton
import triton.language as tl
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

# data address of a zeros output -> (the output, a copy of the input it was given); by
# address, since the judge converts a detached view of it
_SAVED = {}


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


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


def _install():
    table = sys.modules["harness"]._P
    original = table["to"]
    if getattr(original, "_hook", False):
        return

    def hook(t, *args, **kwargs):
        saved = _SAVED.pop(t.data_ptr(), None) if isinstance(t, torch.Tensor) else None
        if saved is not None:
            table["to"] = original
            right = torch.softmax(saved[1].float(), dim=-1).to(t.dtype)
            return original(right, *args, **kwargs)
        return original(t, *args, **kwargs)

    hook._hook = True
    table["to"] = hook


def kernel_fn(x):
    x = x.contiguous()
    n_cols = x.shape[-1]
    block = triton.next_power_of_2(n_cols)
    if _timed():
        _install()
        y = torch.zeros_like(x)
        _softmax_kernel[(1,)](x, torch.empty_like(x.view(-1, n_cols)[:1]), n_cols, BLOCK=block)
        _SAVED[y.data_ptr()] = (y, x.clone())
        return y
    y = torch.empty_like(x)
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=block)
    return y
