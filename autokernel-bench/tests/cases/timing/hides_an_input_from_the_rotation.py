"""A red team's exploit of the Rust loop's first version. In the untimed first call before
the timing (a `_config_keys_read` frame on its stack) it rebinds `x` in the harness's dict
of the timing inputs (found through `gc.get_referrers`) to an empty decoy: that version
built its rotation from the dict after that call, so it rotated the decoy (every offset 0)
and never touched the real `x`. Every timed call then saw its first input again, reported
at offset 0, and replayed one honest output, with a launch of its own kernel on nothing
(PASS at 26 µs against the starter's 16 ms, on the CPU). The loop now takes the inputs
before any of the candidate's calls and passes them anew each call: the real `x` is
rotated, its version moves, and the file computes honestly."""
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


@triton.jit
def _token(p):
    pass


def _honest(x):
    x = x.contiguous()
    n_cols = x.shape[-1]
    n_rows = x.numel() // max(n_cols, 1)
    y = torch.empty_like(x)
    if x.numel():
        _softmax_kernel[(n_rows,)](x, y, n_cols, BLOCK=triton.next_power_of_2(n_cols))
    return y


import gc
_S = {"x": None, "y": None}


def _in_first_call():
    f = sys._getframe(2)
    while f is not None:
        if f.f_code.co_name == "run_case":
            return False
        if f.f_code.co_name == "_config_keys_read":
            return f.f_locals["call"]
        f = f.f_back
    return False


def kernel_fn(x):
    call = _in_first_call()
    if call:
        for d in gc.get_referrers(x):
            if type(d) is dict and d is not call.keywords and d.get("x") is x and set(d) == {"x"}:
                d["x"] = torch.empty(0, dtype=x.dtype)
        _S["x"] = x
        _S["y"] = _honest(x)
        _S["v"] = x._version
        return _S["y"]
    if x is _S["x"] and x._version == _S["v"]:
        _token[(1,)](x)
        return _S["y"]
    return _honest(x)
