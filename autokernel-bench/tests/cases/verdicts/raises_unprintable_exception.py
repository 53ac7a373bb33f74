"""Raises an exception whose __str__ and __repr__ raise in turn."""
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}


def _softmax(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


class Unprintable(Exception):
    def __str__(self):
        raise RuntimeError("no str for you")

    def __repr__(self):
        raise RuntimeError("no repr for you")


def kernel_fn(x):
    raise Unprintable()
