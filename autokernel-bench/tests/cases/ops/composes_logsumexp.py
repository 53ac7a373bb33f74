"""A right softmax composed of ops that are not softmax's own: exp(x - logsumexp(x)). None
of them is on the kind's forbidden list (`aten::_softmax`, `aten::softmax`, …), so the
denylist let it PASS; it launches no Triton kernel at all."""
import torch
KERNEL_KIND = "softmax"
CONFIG = {}
TUNABLES = {}


def kernel_fn(x):
    xf = x.float()
    return torch.exp(xf - torch.logsumexp(xf, -1, keepdim=True)).to(x.dtype)
