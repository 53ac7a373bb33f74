"""A red team's exploit of the timing loop while it was Python. In a timed call (under the
op monitor's `call` and not under `run_case`, as its call stack shows) it looks for the
rotation that overwrites its inputs before each timed call: a caller's local `rotation`,
else an instance of a class named `_Rotation` (of this file) among the objects the garbage
collector tracks. Found, it pins the rotation's record of the offsets its inputs were taken
at (`_offsets`) to their first values, so that every kept output is reported at the
offsets of one call; computes that call right and remembers its output; and from then on
replays a copy of it, launching its own kernel only on one row, into a scratch row (every
call must launch a kernel of its file). Not found (the loop in Rust), it replays all the
same, from the first timed call at the shape: a bet. Timed calls dispatch only
allocation, views and copies (`empty_like`, `view`, `slice`, `clone`)."""
import gc
import sys

import torch
import triton
import triton.language as tl
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

# the bet where no rotation is found: the first timed call's output, per shape, dtype and
# device
_BET = {}


@triton.jit
def _softmax_kernel(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=float("-inf")).to(tl.float32)
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, (e / tl.sum(e, axis=0)).to(y_ptr.dtype.element_ty), mask=mask)


class _Pinned(dict):
    """A rotation's offsets that keep the first value written to each key: the inputs still
    change before every call, but every output kept is reported at the offsets of the call
    whose output is replayed. `replay`: that call's output, once made (it lives here, with
    the rotation: a new rotation is a new measurement of new inputs)."""
    replay = None

    def __setitem__(self, k, v):
        if k not in self:
            dict.__setitem__(self, k, v)


def _timed():
    """A timed call: under the op monitor's `call` and not under `run_case` (whose first
    call goes through `call` too). Names of frames that exist whether the timing loop
    around `call` is Python or Rust."""
    under_call = False
    f = sys._getframe(1)
    while f is not None:
        name = f.f_code.co_name
        if name == "run_case":
            return False
        under_call = under_call or name == "call"
        f = f.f_back
    return under_call


def _rotation(look_in_gc):
    """The rotation of this file's inputs: a caller's local `rotation`, else, when
    `look_in_gc`, an instance of a class named `_Rotation` whose `path` is this file (a
    head-to-head has one per kernel.py); None when neither is found."""
    f = sys._getframe(2)
    while f is not None:
        r = f.f_locals.get("rotation")
        if r is not None:
            return r
        f = f.f_back
    if look_in_gc:
        for o in gc.get_objects():
            if type(o).__name__ == "_Rotation" and getattr(o, "path", None) == __file__:
                return o
    return None


def _pin(rotation):
    """The rotation's offsets, pinned (`_Pinned`) on the first call that finds them; None
    when they cannot be."""
    offsets = getattr(rotation, "_offsets", None)
    if type(offsets) is _Pinned:
        return offsets
    if not isinstance(offsets, dict):
        return None
    try:
        rotation._offsets = pinned = _Pinned(offsets)
    except (AttributeError, TypeError):
        return None
    return pinned


def kernel_fn(x):
    x = x.contiguous()
    n_cols = x.shape[-1]
    block = triton.next_power_of_2(n_cols)
    remember = None  # where this call's right output is to be remembered
    if _timed():
        key = (tuple(x.shape), x.dtype, x.device)
        # the gc is searched only until the bet is placed: a rotation it did not show in
        # the first timed call at this shape will not show later either, and a scan per
        # call would cost far more than the call
        rotation = _rotation(look_in_gc=key not in _BET)
        pinned = _pin(rotation) if rotation is not None else None
        if pinned is not None:
            memory = pinned.replay
            # pinned empty (before the loop's first `before`), these inputs are at no
            # offsets it will report: computed right, not remembered
            if memory is None and len(pinned) > 0:
                remember = pinned
        else:
            memory = _BET.get(key)
            if memory is None:
                remember = _BET
        if memory is not None:
            # the replay: its kernel on one row of x into a scratch row, and the copy
            _softmax_kernel[(1,)](x, torch.empty_like(x.view(-1, n_cols)[:1]), n_cols, BLOCK=block)
            return memory.clone()
    y = torch.empty_like(x)
    _softmax_kernel[(x.numel() // n_cols,)](x, y, n_cols, BLOCK=block)
    if remember is _BET:
        _BET[key] = y.clone()
    elif remember is not None:
        remember.replay = y.clone()
    return y
