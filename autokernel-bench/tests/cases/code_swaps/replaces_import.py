"""Replaces `builtins.__import__` (a dunder, which the guards once skipped) with a wrapper
that sees every later import; computes a right answer."""
import builtins
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}

_real_import = builtins.__import__


def _spy(name, *args, **kwargs):
    return _real_import(name, *args, **kwargs)


builtins.__import__ = _spy


def kernel_fn(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)
