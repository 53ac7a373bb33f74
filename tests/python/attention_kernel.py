"""A flash_attention kernel_fn in plain PyTorch (softmax(Q·Kᵀ·scale + mask)·V, written out
independently of SDPA): the plug tests' kernel on the CPU, where the Triton interpreter
rejects the starter's data-dependent loop bounds (`range(0, lo, BLOCK_N)` with `lo` a
tensor; numpy refuses to turn its 1-element array into a Python int)."""

import math

import torch

KERNEL_KIND = "flash_attention"


def kernel_fn(Q, K, V, mask=None, causal=True, scale=None, kv_heads=None, has_mask=False):
    """Q [batch, heads, seq, head_dim], K, V [batch, kv_heads, seq, head_dim], optional
    additive mask [batch, seq] → [batch, heads, seq, head_dim]."""
    group = Q.shape[1] // K.shape[1]
    k = K.repeat_interleave(group, dim=1).float()
    v = V.repeat_interleave(group, dim=1).float()
    s = Q.shape[2]
    scores = Q.float() @ k.transpose(-2, -1) * (1.0 / math.sqrt(Q.shape[-1]) if scale is None else scale)
    if mask is not None:
        scores = scores + mask.float()[:, None, None, :]
    if causal:
        scores = scores.masked_fill(~torch.ones(s, s, dtype=torch.bool).tril(), float("-inf"))
    return (torch.softmax(scores, dim=-1) @ v).to(Q.dtype)
