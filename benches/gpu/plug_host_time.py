"""Host time of an exported package's plugs in a Hugging Face BERT model, eager, on a GPU:
the forward with and without the package (a plain loop of 20 forwards under
`torch.no_grad()`, three times; the time to enqueue beside the total, to show whether the
host sets the pace), one `LayerNorm` module called 1 000 times on a [8, 512, 768] input with
and without its plug, then a `torch.profiler` table of three forwards each (docs/benchmarks.md,
"BERT-base after the contexts rule").

Usage (repository root, on the GPU machine; PKG a folder `autokernel export` wrote for
BertModel at 8×512 float16, as benches/gpu/e2e.sh leaves it):

    python3 benches/gpu/plug_host_time.py PKG
"""
import importlib
import os
import sys
import time

import torch
from torch.profiler import ProfilerActivity, profile
from transformers import BertConfig, BertModel


def main():
    folder = os.path.abspath(sys.argv[1])
    sys.path.insert(0, folder)
    names = [n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n, "__init__.py"))]
    package = importlib.import_module(names[0])
    torch.manual_seed(0)
    plain = BertModel(BertConfig()).cuda().half().eval()
    plugged = BertModel(BertConfig()).cuda().half().eval()
    plugged.load_state_dict(plain.state_dict())
    ids = torch.randint(0, 30522, (8, 512), device="cuda")
    print(package.optimize(plugged), flush=True)

    def forward_ms(model, n=20):
        """(total, enqueue) ms per forward of a plain loop."""
        with torch.no_grad():
            for _ in range(3):
                model(ids)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                model(ids)
            enqueued = time.perf_counter()
            torch.cuda.synchronize()
            done = time.perf_counter()
        return round((done - t0) / n * 1e3, 3), round((enqueued - t0) / n * 1e3, 3)

    for _ in range(3):
        print("forward ms (total, enqueue): plain", forward_ms(plain), "with the package", forward_ms(plugged),
              flush=True)
    norm, norm_plugged = plain.encoder.layer[0].output.LayerNorm, plugged.encoder.layer[0].output.LayerNorm
    x = torch.randn(8, 512, 768, device="cuda", dtype=torch.half)

    def call_us(f, n=1000):
        """(total, enqueue) µs per call of a plain loop."""
        with torch.no_grad():
            f(x)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                f(x)
            enqueued = time.perf_counter()
            torch.cuda.synchronize()
            done = time.perf_counter()
        return round((done - t0) / n * 1e6, 1), round((enqueued - t0) / n * 1e6, 1)

    for _ in range(3):
        print("LayerNorm call µs (total, enqueue): plain", call_us(norm), "plugged", call_us(norm_plugged),
              flush=True)
    for name, model in (("plain", plain), ("with the package", plugged)):
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(3):
                model(ids)
            torch.cuda.synchronize()
        print(name)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22), flush=True)


if __name__ == "__main__":
    main()
