"""The toy kind `toy_scale` (y = 2·x)'s Python side: its input generator and reference,
registered the way a new kind's are (docs/kernels.md, "Adding a kind"). The worker
imports this file after the built-in registry when a test starts it with
`Worker::with_kinds`."""

import torch

import catalogue


def make_inputs(dims, dtype, g, mode):
    """x [rows, cols] in float32, following the stability stage's input mode."""
    rows, cols = dims
    if mode == "zeros":
        return {"x": torch.zeros(rows, cols)}
    if mode == "constant":
        return {"x": torch.randn(rows, 1, generator=g).expand(rows, cols).contiguous()}
    x = torch.randn(rows, cols, generator=g)
    if mode == "large":
        x = x.clamp(-3, 3) * 1.0e4  # 2·x stays below float16's max (65504)
    elif mode == "small":
        x = x * 1.0e-3
    elif mode == "mixed":
        x = x * torch.pow(10.0, torch.rand(rows, 1, generator=g) * 6.0 - 3.0)
    return {"x": x}


def reference(f):
    """2·x in float32."""
    return 2.0 * f["x"]


catalogue.register("toy_scale", make_inputs=make_inputs, reference=reference)
