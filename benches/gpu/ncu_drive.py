"""A program for Nsight Compute: each kernel file's kernel_fn, then torch.softmax, twice on
one float16 input of ROWS x COLS (default 4096 x 50257), so that `ncu -k regex:...` can
profile the starter, its variants and PyTorch's kernel side by side.
Usage (on the GPU machine, from the repository root), as in docs/benchmarks.md:
  ncu --clock-control none -k regex:"softmax|SoftMax" --section SpeedOfLight \\
      --section Occupancy --section LaunchStats --section WarpStateStats \\
      python3 benches/gpu/ncu_drive.py autokernel-bench/python/starters/softmax.py [FILE...]
Set SHAPE=ROWSxCOLS for another input.
"""
import importlib.util
import os
import sys

import torch

rows, cols = (int(d) for d in os.environ.get("SHAPE", "4096x50257").split("x"))
x = torch.randn(rows, cols, device="cuda", dtype=torch.float16)
for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("kernel", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for _ in range(2):
        module.kernel_fn(x)
for _ in range(2):
    torch.softmax(x, dim=-1)
torch.cuda.synchronize()
