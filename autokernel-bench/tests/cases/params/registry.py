"""The toy kind `toy_factor` (y = factor·x, one parameter `factor`, default 2)'s Python
side, registered the way a kind with parameters registers (docs/kernels.md, "Adding a
kind"): each function gets the parameters, defaults filled. The worker imports this file
after the built-in registry when a test starts it with `Worker::with_kinds`."""

import torch

import catalogue


def make_inputs(dims, dtype, g, mode, params):
    """x [rows, cols] in float32, following the input mode; |factor·x| stays below
    float16's max in the large mode."""
    rows, cols = dims
    if mode == "zeros":
        return {"x": torch.zeros(rows, cols)}
    if mode == "constant":
        return {"x": torch.randn(rows, 1, generator=g).expand(rows, cols).contiguous()}
    x = torch.randn(rows, cols, generator=g)
    if mode == "large":
        x = x.clamp(-3, 3) * (6.0e4 / 3.0 / abs(params["factor"]))
    elif mode == "small":
        x = x * 1.0e-3
    elif mode == "mixed":
        x = x * torch.pow(10.0, torch.rand(rows, 1, generator=g) * 6.0 - 3.0)
    return {"x": x}


def reference(f, params, dtype):
    """factor·x in float32."""
    return params["factor"] * f["x"]


catalogue.register("toy_factor", make_inputs=make_inputs, reference=reference)
