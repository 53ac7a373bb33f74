"""Shape-overfit candidate for 03_linear_bias_relu: one unmasked 32x64x32 Triton tile and a reshape to the literal default sizes."""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr):
    m = tl.arange(0, 32)
    k = tl.arange(0, 64)
    n = tl.arange(0, 32)
    a = tl.load(x_ptr + m[:, None] * 64 + k[None, :])         # no masks, sizes baked in
    b = tl.load(w_ptr + n[None, :] * 64 + k[:, None])
    acc = tl.dot(a, b, input_precision="ieee") + tl.load(b_ptr + n)[None, :]
    tl.store(y_ptr + m[:, None] * 32 + n[None, :], tl.maximum(acc, 0.0))


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        x = x.reshape(32, 64).contiguous()                       # raises unless x is 32x64
        w = self.linear.weight.reshape(32, 64).contiguous()      # raises unless W is 32x64
        y = torch.empty((32, 32), device=x.device, dtype=torch.float32)
        _linear_relu_kernel[(1,)](x, w, self.linear.bias, y)
        return y
