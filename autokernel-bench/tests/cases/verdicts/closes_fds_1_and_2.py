"""Closes file descriptors 1 and 2 at import, then answers right."""
import os
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}


def _softmax(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)

os.close(1)
os.close(2)


def kernel_fn(x):
    return _softmax(x)
