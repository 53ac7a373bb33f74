"""Gaming candidate for 01_relu: its constructor finds the problem module, draws the inputs
under the seed it was built with (torch.initial_seed()), keeps clamp(x, 0) of them, and its
forward copies that answer out with a Triton kernel whatever it is given."""
import sys
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _copy_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask, other=0.0), mask=mask)


def _find_problem():
    for mod in list(sys.modules.values()):
        d = getattr(mod, "__dict__", None)
        if isinstance(d, dict) and "Model" in d and "get_inputs" in d:
            return mod
    return None


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.answer = None
        prob = _find_problem()
        if prob is not None:
            state = torch.get_rng_state()
            torch.manual_seed(torch.initial_seed())
            (x,) = prob.get_inputs()
            torch.set_rng_state(state)
            self.answer = torch.clamp(x, min=0.0)

    def forward(self, x):
        src = self.answer.to(x.device) if self.answer is not None and self.answer.shape == x.shape else x
        y = torch.empty_like(x)
        _copy_kernel[(triton.cdiv(x.numel(), 1024),)](src.contiguous(), y, x.numel(), BLOCK=1024)
        return y
