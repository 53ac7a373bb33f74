"""GPT-2 small (124M parameters), plain PyTorch, random weights: 12 layers, hidden 768,
12 heads, vocab 50257, context 1024, pre-LayerNorm blocks, GELU MLP, causal
F.scaled_dot_product_attention, weight-tied LM head."""

import torch
import torch.nn.functional as F
from torch import nn

EXAMPLE = {
    "class": "GPT2",
    "input_shape": [1, 1024],
    "kwargs": {"vocab": 50257, "context": 1024, "hidden": 768, "layers": 12, "heads": 12},
}


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)
        q, k, v = (t.view(b, s, self.heads, h // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(b, s, h))


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.act = nn.GELU(approximate="tanh")
        self.c_proj = nn.Linear(4 * hidden, hidden)

    def forward(self, x):
        return self.c_proj(self.act(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden)
        self.mlp = MLP(hidden)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2(nn.Module):
    """Token ids [batch, seq ≤ context] → logits [batch, seq, vocab]."""

    def __init__(self, vocab=50257, context=1024, hidden=768, layers=12, heads=12):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(context, hidden)
        self.h = nn.ModuleList(Block(hidden, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.wte(ids) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))
