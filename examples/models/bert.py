"""BERT-base encoder, plain PyTorch, random weights: 12 layers, hidden 768, 12 heads,
intermediate 3072, vocab 30522, 512 positions, post-LayerNorm blocks, GELU, non-causal
F.scaled_dot_product_attention."""

import torch
import torch.nn.functional as F
from torch import nn

EXAMPLE = {
    "class": "Bert",
    "input_shape": [8, 512],
    "kwargs": {"vocab": 30522, "positions": 512, "hidden": 768, "layers": 12, "heads": 12,
               "intermediate": 3072},
}


class SelfAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.output = nn.Linear(hidden, hidden)

    def forward(self, x):
        b, s, h = x.shape
        shape = (b, s, self.heads, h // self.heads)
        q, k, v = (p(x).view(shape).transpose(1, 2) for p in (self.query, self.key, self.value))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=False)
        return self.output(y.transpose(1, 2).reshape(b, s, h))


class Layer(nn.Module):
    def __init__(self, hidden, heads, intermediate):
        super().__init__()
        self.attention = SelfAttention(hidden, heads)
        self.attention_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.intermediate = nn.Linear(hidden, intermediate)
        self.act = nn.GELU()
        self.out = nn.Linear(intermediate, hidden)
        self.output_norm = nn.LayerNorm(hidden, eps=1e-12)

    def forward(self, x):
        x = self.attention_norm(x + self.attention(x))
        return self.output_norm(x + self.out(self.act(self.intermediate(x))))


class Bert(nn.Module):
    """Token ids [batch, seq ≤ positions] → hidden states [batch, seq, hidden]."""

    def __init__(self, vocab=30522, positions=512, hidden=768, layers=12, heads=12,
                 intermediate=3072):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, hidden)
        self.position_embeddings = nn.Embedding(positions, hidden)
        self.token_type_embeddings = nn.Embedding(2, hidden)
        self.embeddings_norm = nn.LayerNorm(hidden, eps=1e-12)
        self.layers = nn.ModuleList(Layer(hidden, heads, intermediate) for _ in range(layers))

    def forward(self, ids):
        pos = torch.arange(ids.shape[1], device=ids.device)
        x = self.word_embeddings(ids) + self.position_embeddings(pos) + self.token_type_embeddings(torch.zeros_like(ids))
        x = self.embeddings_norm(x)
        for layer in self.layers:
            x = layer(x)
        return x
