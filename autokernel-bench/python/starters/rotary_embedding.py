"""Rotary position embedding of x [batch, heads, seq, head_dim], one tensor (Q or K) a call.

Pair i of a row at position s is rotated by the angle whose cos and sin are cos[s, i],
sin[s, i] (tables [seq, head_dim/2]); `pairing` says which lanes form pair i:
- ``interleaved`` (RoFormer): lanes (2i, 2i+1),
- ``half_split`` (HF transformers' ``rotate_half``): lanes (i, i + head_dim/2),
and for a pair (a, b):
    out[a] = x[a]·cos − x[b]·sin
    out[b] = x[a]·sin + x[b]·cos

Starter kernel of autokernel (kind `rotary_embedding`). Memory-bound. Each program
rotates BLOCK_ROWS rows of x (a row = one (batch, head, position) vector of head_dim).
Interleaved: each row is loaded contiguously and split into even/odd lanes in registers
(reshape + split, then join on the way out), so loads and stores stay fully coalesced.
Half-split: the two halves of a row are two contiguous loads. The cos/sin tables are tiny
and stay in L2. Arithmetic in float32.
"""

import torch
import triton
import triton.language as tl

KERNEL_KIND = "rotary_embedding"
# 16-row programs of 8 warps: faster at 1x32x2048x128 float16 than the 4-row, 4-warp ones
# they replaced (docs/benchmarks.md, "What was tried on the rows that miss").
CONFIG = {"BLOCK_ROWS": 16, "num_warps": 8, "num_stages": 1}
TUNABLES = {
    "BLOCK_ROWS": [1, 2, 4, 8, 16, 32, 64],
    "num_warps": [1, 2, 4, 8],
    "num_stages": [1, 2],
}


# rotary_embedding's `pairing` values, as the kernel's HALF_SPLIT constexpr
_PAIRINGS = {"interleaved": False, "half_split": True}


@triton.jit
def _rotary_kernel(x_ptr, cos_ptr, sin_ptr, y_ptr, n_rows, seq, head_dim,
                   BLOCK_ROWS: tl.constexpr, HALF: tl.constexpr, HALF_SPLIT: tl.constexpr):
    pid = tl.program_id(0)
    rows = pid * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_ok = rows < n_rows
    rows = tl.minimum(rows, n_rows - 1)  # past the end: re-read the last row, not stored
    pos = rows % seq
    half = head_dim // 2
    pair = tl.arange(0, HALF)
    pair_ok = pair < half
    offs_t = pos[:, None] * half + pair[None, :]
    c = tl.load(cos_ptr + offs_t, mask=pair_ok[None, :], other=0.0).to(tl.float32)
    s = tl.load(sin_ptr + offs_t, mask=pair_ok[None, :], other=0.0).to(tl.float32)
    base = rows.to(tl.int64)[:, None] * head_dim
    if HALF_SPLIT:
        # pair i: lanes i and i + head_dim/2, each half of the row one contiguous load
        offs_a = base + pair[None, :]
        offs_b = offs_a + half
        ok = row_ok[:, None] & pair_ok[None, :]
        a = tl.load(x_ptr + offs_a, mask=pair_ok[None, :], other=0.0).to(tl.float32)
        b = tl.load(x_ptr + offs_b, mask=pair_ok[None, :], other=0.0).to(tl.float32)
        tl.store(y_ptr + offs_a, (a * c - b * s).to(y_ptr.dtype.element_ty), mask=ok)
        tl.store(y_ptr + offs_b, (a * s + b * c).to(y_ptr.dtype.element_ty), mask=ok)
    else:
        # pair i: lanes (2i, 2i+1) of the row
        lane = tl.arange(0, 2 * HALF)
        lane_ok = lane < head_dim
        offs_x = base + lane[None, :]
        x = tl.load(x_ptr + offs_x, mask=lane_ok[None, :], other=0.0).to(tl.float32)
        x_even, x_odd = tl.split(tl.reshape(x, [BLOCK_ROWS, HALF, 2]))
        y_even = x_even * c - x_odd * s
        y_odd = x_even * s + x_odd * c
        y = tl.reshape(tl.join(y_even, y_odd), [BLOCK_ROWS, 2 * HALF])
        tl.store(y_ptr + offs_x, y.to(y_ptr.dtype.element_ty), mask=row_ok[:, None] & lane_ok[None, :])


def kernel_fn(x, cos, sin, pairing="interleaved"):
    """x [b, h, s, d], cos/sin [s, d/2] → rotated x, same shape and dtype as x; `pairing`
    ``interleaved`` or ``half_split`` (which lanes are rotated together)."""
    if pairing not in _PAIRINGS:
        raise ValueError(f"unknown pairing {pairing!r}; expected one of {', '.join(_PAIRINGS)}")
    x = x.contiguous()
    head_dim = x.shape[-1]
    seq = x.shape[-2]
    n_rows = x.numel() // head_dim
    y = torch.empty_like(x)
    block_rows = CONFIG["BLOCK_ROWS"]
    _rotary_kernel[(triton.cdiv(n_rows, block_rows),)](
        x, cos.contiguous(), sin.contiguous(), y, n_rows, seq, head_dim,
        BLOCK_ROWS=block_rows, HALF=max(1, triton.next_power_of_2(head_dim // 2)),
        HALF_SPLIT=_PAIRINGS[pairing], num_warps=CONFIG["num_warps"], num_stages=CONFIG["num_stages"])
    return y
