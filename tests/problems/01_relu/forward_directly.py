"""Gaming: calls the reference Model.forward directly (not through __call__, so no module hook sees it), after a Triton kernel that does nothing."""
import sys
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _noop(x_ptr):
    pass


class ModelNew(nn.Module):
    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        _noop[(1,)](x)
        ref = next(m for m in list(sys.modules.values()) if "Model" in getattr(m, "__dict__", {}) and "get_inputs" in m.__dict__)
        return ref.Model.forward(self, x)
