"""cuBLAS on GPT-2's LM head shape, as eager PyTorch runs it (``x @ W.T``, float16, 1024
tokens, 768 features) at the vocabulary's 50257 columns and padded to a multiple of 8 and of
64: an output row stride that is not a multiple of 8 halves keeps cuBLAS off its aligned
tensor-core kernels, which is why the matmul starter wins that target (docs/benchmarks.md).

Usage (one GPU): python3 benches/gpu/lm_head_cublas.py

Times are ``triton.testing.do_bench`` medians; TFLOP/s is 2·M·N·K over the time.
"""

import torch
import triton.testing

M, K = 1024, 768
for n in (50257, 50264, 50304):
    a = torch.randn(M, K, device="cuda", dtype=torch.float16)
    w = torch.randn(n, K, device="cuda", dtype=torch.float16)
    ms = triton.testing.do_bench(lambda: a @ w.T)
    print(f"cuBLAS {M}x{n}x{K} float16 (x @ W.T): {ms * 1e3:.1f} µs, {2 * M * n * K / ms / 1e9:.0f} TFLOP/s")
