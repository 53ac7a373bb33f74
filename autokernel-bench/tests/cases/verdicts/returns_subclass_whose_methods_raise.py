"""Returns a tensor subclass holding the right answer, whose every torch function,
method and attribute raises, and whose class name cannot be looked up."""
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}


def _softmax(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


class _Meta(type(torch.Tensor)):
    def __getattribute__(cls, name):
        if name in ("__name__", "__qualname__", "__module__"):
            raise RuntimeError("no name for you")
        return super().__getattribute__(name)


class Hostile(torch.Tensor, metaclass=_Meta):
    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        raise RuntimeError("no method works on me")

    def __getattribute__(self, name):
        raise RuntimeError("no attribute either")


def kernel_fn(x):
    return torch.Tensor._make_subclass(Hostile, _softmax(x))
