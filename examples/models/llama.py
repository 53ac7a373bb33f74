"""A LLaMA-style decoder (134M parameters with the defaults), plain PyTorch, random weights.

RMSNorm, interleaved rotary position embedding, SwiGLU MLP, causal
F.scaled_dot_product_attention. Standard module types (nn.Linear, nn.Embedding, an
`RMSNorm` class, a `SwiGLU` class) so that optimised kernels can be plugged in later.
Defaults: 12 layers, hidden 768, 12 heads, intermediate 2048, vocab 32000.
"""

import torch
import torch.nn.functional as F
from torch import nn

EXAMPLE = {
    "class": "Llama",
    "input_shape": [1, 512],
    "kwargs": {"vocab": 32000, "hidden": 768, "layers": 12, "heads": 12, "intermediate": 2048},
}


class RMSNorm(nn.Module):
    """x / sqrt(mean(x²) + eps) · weight over the last dim."""

    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


class RotaryEmbedding(nn.Module):
    """Interleaved rotary embedding: pairs (x[..., 2i], x[..., 2i+1]) rotated by position."""

    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x):  # x [b, h, s, d]
        s = x.shape[-2]
        t = torch.arange(s, device=x.device, dtype=torch.float32)
        freqs = torch.outer(t, self.inv_freq.to(x.device))  # [s, d/2]
        cos, sin = freqs.cos().to(x.dtype), freqs.sin().to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)
        return out.flatten(-2)


class Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.head_dim = hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.rotary = RotaryEmbedding(self.head_dim)

    def forward(self, x):
        b, s, h = x.shape
        shape = (b, s, self.heads, self.head_dim)
        q = self.q_proj(x).view(shape).transpose(1, 2)
        k = self.k_proj(x).view(shape).transpose(1, 2)
        v = self.v_proj(x).view(shape).transpose(1, 2)
        q, k = self.rotary(q), self.rotary(k)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o_proj(y.transpose(1, 2).reshape(b, s, h))


class SwiGLU(nn.Module):
    """down(silu(gate(x)) · up(x))."""

    def __init__(self, hidden, intermediate):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.input_norm = RMSNorm(hidden)
        self.attn = Attention(hidden, heads)
        self.post_norm = RMSNorm(hidden)
        self.mlp = SwiGLU(hidden, intermediate)

    def forward(self, x):
        x = x + self.attn(self.input_norm(x))
        return x + self.mlp(self.post_norm(x))


class Llama(nn.Module):
    """Token ids [batch, seq] → logits [batch, seq, vocab]."""

    def __init__(self, vocab=32000, hidden=768, layers=12, heads=12, intermediate=2048):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.layers = nn.ModuleList(Block(hidden, heads, intermediate) for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids):
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))
