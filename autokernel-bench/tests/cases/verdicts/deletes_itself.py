"""Deletes its own file at import; computes a right answer otherwise."""
import os
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}


def _softmax(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)

os.remove(__file__)


def kernel_fn(x):
    return _softmax(x)
