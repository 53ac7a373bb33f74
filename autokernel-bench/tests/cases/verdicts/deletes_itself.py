"""Deletes its own file at import (where the sandbox lets it); computes a right answer
otherwise."""
import os
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}


def _softmax(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)

try:
    os.remove(__file__)
except OSError:
    pass  # the sandbox refused: the file stays


def kernel_fn(x):
    return _softmax(x)
