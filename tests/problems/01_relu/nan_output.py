"""Wrong: every output NaN (a verdict, FAIL, never an error of the judge)."""
import torch, torch.nn as nn, triton, triton.language as tl
@triton.jit
def _k(x_ptr, y_ptr, n, B: tl.constexpr):
    o = tl.program_id(0) * B + tl.arange(0, B)
    m = o < n
    tl.store(y_ptr + o, tl.load(x_ptr + o, mask=m) * float("nan"), mask=m)
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
    def forward(self, x):
        y = torch.empty_like(x); n = x.numel()
        _k[(triton.cdiv(n, 1024),)](x, y, n, B=1024)
        return y
