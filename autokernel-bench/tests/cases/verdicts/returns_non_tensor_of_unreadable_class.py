"""Returns an object that is not a tensor, of a class whose name cannot be looked up
(its metaclass raises on __name__, __qualname__ and __module__)."""
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


class NotATensor(metaclass=_Meta):
    pass


def kernel_fn(x):
    return NotATensor()
