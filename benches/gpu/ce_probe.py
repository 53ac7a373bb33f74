"""Times cross-entropy kernel files' `kernel_fn` alone at 4096x32000 and 4096x50257 float16
(triton.testing.do_bench, which flushes L2 between calls), checks each against
torch.nn.functional.cross_entropy and prints µs and GB/s of logits read.

    python3 benches/gpu/ce_probe.py FILE...   (on the GPU machine; name files twice, interleaved, to see the spread)
"""
import importlib.util
import sys

import torch
from triton.testing import do_bench

for path in sys.argv[1:]:
    spec = importlib.util.spec_from_file_location("ce", path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    for cols in (32000, 50257):
        x = torch.randn(4096, cols, device="cuda", dtype=torch.float16)
        t = torch.randint(0, cols, (4096,), device="cuda")
        us = do_bench(lambda: m.kernel_fn(x, t), warmup=50, rep=500) * 1e3
        ok = torch.allclose(m.kernel_fn(x, t), torch.nn.functional.cross_entropy(x.float(), t), rtol=1e-4)
        print(f"{path} cols {cols}: {us:.1f} us, {x.numel() * 2 / us / 1e3:.0f} GB/s, matches {ok}")
