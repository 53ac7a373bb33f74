"""Ceilings of the GPU this runs on, measured the way docs/benchmarks.md reports them.

Prints one JSON object: device-to-device copy bandwidth (bytes read + written) of a 2.1 GB
buffer and of buffers the size of the table's memory-bound problems (a small copy pays the
same fixed costs, launch, ramp-up and the last wave's tail, that a kernel of that size
pays), cuBLAS fp16 matmul TFLOP/s at the issue's shapes, PyTorch's causal SDPA and eager
SwiGLU latencies.
Timing: triton.testing.do_bench (median, L2 flushed between repetitions).
Usage: python3 benches/gpu/ceilings.py > ceilings.json
"""
import json

import torch
import torch.nn.functional as F
import triton.testing


# Bytes moved (MB, read + written) by the memory-bound rows of the issue-8 table: rotary
# 1x32x2048x128, the 4096x4096 rows, reduce 8192x8192 (read only), the 8192x8192 rows,
# cross_entropy 4096x32000 and 4096x50257 (read only), softmax 4096x50257.
SAME_SIZE_MB = [34, 67, 134, 268, 262, 412, 823]


def median_ms(fn):
    return float(triton.testing.do_bench(fn, warmup=50, rep=300, return_mode="median"))


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    out = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    n = 2 ** 30  # 1 Gi fp16 elements = 2.1 GB per buffer
    x = torch.empty(n, dtype=torch.float16, device="cuda").normal_()
    y = torch.empty_like(x)
    ms = median_ms(lambda: y.copy_(x))
    out["copy_gb_s"] = 2 * n * 2 / (ms * 1e-3) / 1e9
    # Same-size copies: one per total of bytes moved (read + written) by a table row, in MB.
    out["copy_gb_s_by_mb_moved"] = {}
    for mb_moved in SAME_SIZE_MB:
        m = int(mb_moved * 1e6 / 2 / 2)  # fp16 elements per buffer: half the bytes each way
        ms = median_ms(lambda: y[:m].copy_(x[:m]))
        out["copy_gb_s_by_mb_moved"][str(mb_moved)] = 2 * m * 2 / (ms * 1e-3) / 1e9
    del x, y
    for m, nn_, k in [(4096, 4096, 4096), (4096, 11008, 4096)]:
        a = torch.randn(m, k, dtype=torch.float16, device="cuda")
        b = torch.randn(k, nn_, dtype=torch.float16, device="cuda")
        ms = median_ms(lambda: a @ b)
        out[f"cublas_tflops_{m}x{nn_}x{k}"] = 2 * m * nn_ * k / (ms * 1e-3) / 1e12
        out[f"cublas_us_{m}x{nn_}x{k}"] = ms * 1e3
    q, kk, v = (torch.randn(1, 32, 2048, 128, dtype=torch.float16, device="cuda") for _ in range(3))
    out["sdpa_causal_us_1x32x2048x128"] = median_ms(lambda: F.scaled_dot_product_attention(q, kk, v, is_causal=True)) * 1e3
    t, h, i = 2048, 4096, 11008
    xm = torch.randn(t, h, dtype=torch.float16, device="cuda") * 0.1
    wg, wu = (torch.randn(i, h, dtype=torch.float16, device="cuda") * 0.02 for _ in range(2))
    wd = torch.randn(h, i, dtype=torch.float16, device="cuda") * 0.02
    out["swiglu_eager_us_2048x4096x11008"] = median_ms(lambda: (F.silu(xm @ wg.t()) * (xm @ wu.t())) @ wd.t()) * 1e3
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
