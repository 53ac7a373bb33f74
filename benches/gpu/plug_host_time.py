"""Host time of an exported package's plugs in a Hugging Face BERT model, eager, on a GPU.

Three instances of the same model (weights shared by copy): the model alone; optimized with
the kernels taking eager calls (``contexts`` every context: each plugged call runs the
kernel, through the operator's direct eager path); optimized with eager handed back to the
model's own code (``contexts=("cudagraph", "compile")``: what ``optimize`` chooses when the
verification measured eager slower with the kernels). For each: the forward (a plain loop of
20 forwards under ``torch.no_grad()``, three times; the time to enqueue beside the total,
to show whether the host sets the pace) and one ``LayerNorm`` module called 1 000 times on
a [8, 512, 768] input (docs/benchmarks.md, "BERT-base after the contexts rule" and after).

Usage (repository root, on the GPU machine; PKG a folder `autokernel export` wrote for
BertModel at 8×512 float16, as benches/gpu/e2e.sh leaves it):

    python3 benches/gpu/plug_host_time.py PKG
"""
import importlib
import os
import sys
import time

import torch
from transformers import BertConfig, BertModel


def main():
    folder = os.path.abspath(sys.argv[1])
    sys.path.insert(0, folder)
    names = [n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n, "__init__.py"))]
    package = importlib.import_module(names[0])
    torch.manual_seed(0)
    plain = BertModel(BertConfig()).cuda().half().eval()
    models = {"alone": plain}
    for name, contexts in (("kernels in eager", ("eager", "cudagraph", "compile")),
                           ("eager handed back", ("cudagraph", "compile"))):
        m = BertModel(BertConfig()).cuda().half().eval()
        m.load_state_dict(plain.state_dict())
        print(name, package.optimize(m, contexts=contexts), sep=": ", flush=True)
        models[name] = m
    ids = torch.randint(0, 30522, (8, 512), device="cuda")

    def per_call(f, arg, n, warmup, scale, digits):
        """(total, enqueue) time per call of a plain loop of `n` calls of f(arg) under
        `torch.no_grad()`, after `warmup` calls, in seconds times `scale`, rounded."""
        with torch.no_grad():
            for _ in range(warmup):
                f(arg)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(n):
                f(arg)
            enqueued = time.perf_counter()
            torch.cuda.synchronize()
            done = time.perf_counter()
        return round((done - t0) / n * scale, digits), round((enqueued - t0) / n * scale, digits)

    for _ in range(3):
        print("forward ms (total, enqueue):",
              "; ".join(f"{k} {per_call(m, ids, 20, 3, 1e3, 3)}" for k, m in models.items()), flush=True)
    x = torch.randn(8, 512, 768, device="cuda", dtype=torch.half)
    for _ in range(3):
        print("LayerNorm call µs (total, enqueue):",
              "; ".join(f"{k} {per_call(m.encoder.layer[0].output.LayerNorm, x, 1000, 1, 1e6, 1)}"
                        for k, m in models.items()),
              flush=True)


if __name__ == "__main__":
    main()
