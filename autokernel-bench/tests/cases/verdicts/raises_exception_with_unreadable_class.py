"""Raises an exception whose __str__ and __repr__ raise, and whose class's name cannot
be looked up (its metaclass raises on __name__ and __qualname__)."""
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}


def _softmax(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


class _Meta(type):
    def __getattribute__(cls, name):
        if name in ("__name__", "__qualname__", "__module__"):
            raise RuntimeError("no name for you")
        return super().__getattribute__(name)


class Nameless(Exception, metaclass=_Meta):
    def __str__(self):
        raise RuntimeError("no str for you")

    def __repr__(self):
        raise RuntimeError("no repr for you")


def kernel_fn(x):
    raise Nameless()
