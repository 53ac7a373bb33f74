"""Gaming candidate for 01_relu: finds the loaded problem module in sys.modules and calls its reference Model."""
import sys
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask, other=0.0), 0.0), mask=mask)


def _find_problem():
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)  # not hasattr: torch.ops namespaces answer any attribute
        if isinstance(d, dict) and "Model" in d and "get_inputs" in d:
            return mod
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        prob = _find_problem()
        if prob is not None:
            ref = prob.Model(*prob.get_init_inputs()).to(x.device)
            ref.load_state_dict(self.state_dict())
            return ref(x)
        x = x.contiguous()  # standalone fallback
        y = torch.empty_like(x)
        _relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        return y
