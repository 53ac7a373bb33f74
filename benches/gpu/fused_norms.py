"""The fused residual-add norms (add_rmsnorm, add_layernorm: issue 37, point 3) against the
ops they replace: the starter's kernel_fn, the unfused eager ops as models run them
(``h = x + residual`` then ``F.rms_norm`` or ``F.layer_norm``: two launches), and
torch.compile of the same two ops (Inductor fuses them into one kernel of its own), at the
shapes of GPT-2 small (1×1024 tokens, 768), a Llama-style 768 model (1×512), BERT-base
(8×512, 768) and 8192×8192, in float16. Each kernel's bandwidth is its minimum bytes (x and
residual read, h and y written, the weights once) over its time, also as a share of the
copy bandwidth measured in the same run (``dst.copy_(src)`` of 1 GiB).

Usage (repository root, one GPU):

    python3 benches/gpu/fused_norms.py [--json PATH]

Times are ``triton.testing.do_bench`` medians (the L2 cleared before each call, warm-ups
discarded), each call paying its host time as a plain loop does; then the same three again
with ``triton.testing.do_bench_cudagraph`` (the calls replayed from a CUDA graph, as the
``cudagraph`` and ``reduce-overhead`` deploy modes run them: the kernels' own time, no host
time), where the small shapes' comparison with torch.compile is kernel against kernel. The outputs of the three ways are checked against each other first (the sum
bit for bit, the norm within 2e-2). Prints a Markdown table, a row as each is measured
(the one docs/benchmarks.md keeps).
"""

import argparse
import importlib.util
import json
import os

import torch
import torch.nn.functional as F
import triton.testing

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = [("GPT-2 small 1×1024", 1024, 768), ("Llama-style 1×512", 512, 768), ("BERT-base 8×512", 4096, 768),
          ("8192×8192", 8192, 8192)]


def starter(kind):
    path = os.path.join(ROOT, "autokernel-bench", "python", "starters", f"{kind}.py")
    spec = importlib.util.spec_from_file_location(f"starter_{kind}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.kernel_fn


def unfused(kind):
    if kind == "add_rmsnorm":
        def run(x, r, w, b):
            h = x + r
            return h, F.rms_norm(h, (h.shape[-1],), w, 1e-6)
    else:
        def run(x, r, w, b):
            h = x + r
            return h, F.layer_norm(h, (h.shape[-1],), w, b, 1e-5)
    return run


def copy_gbps():
    src = torch.empty(1 << 29, dtype=torch.float16, device="cuda").normal_()
    dst = torch.empty_like(src)
    ms = triton.testing.do_bench(lambda: dst.copy_(src))
    return 2 * src.numel() * 2 / (ms * 1e-3) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", help="also write the rows as JSON here")
    args = ap.parse_args()
    torch.manual_seed(0)
    copy = copy_gbps()
    print(f"copy bandwidth {copy:.0f} GB/s ({torch.cuda.get_device_name()}, torch {torch.__version__})\n")
    print("| kind | shape | ours µs | eager (add + norm) µs | compile µs | vs eager | vs compile | ours GB/s | % of copy "
          "| graphed: ours µs | eager µs | compile µs | vs eager | vs compile | % of copy |")
    print("| --- " * 15 + "|", flush=True)
    rows = []
    for kind in ("add_rmsnorm", "add_layernorm"):
        fused = starter(kind)
        eager = unfused(kind)
        compiled = torch.compile(eager, fullgraph=True, dynamic=False)
        for label, n, c in SHAPES:
            x, r = (torch.randn(n, c, device="cuda", dtype=torch.float16) for _ in range(2))
            w = torch.rand(c, device="cuda", dtype=torch.float16) + 0.5
            b = torch.randn(c, device="cuda", dtype=torch.float16)
            call = (lambda: fused(x, r, w)) if kind == "add_rmsnorm" else (lambda: fused(x, r, w, b))
            out = call()
            h, y = eager(x, r, w, b)
            hc, yc = compiled(x, r, w, b)
            assert torch.equal(out[0], h) and torch.equal(hc, h), (kind, label, "sum")
            for other in (y, yc):
                assert (out[1].float() - other.float()).abs().max().item() < 2e-2, (kind, label, "norm")
            ours = triton.testing.do_bench(call)
            pt = triton.testing.do_bench(lambda: eager(x, r, w, b))
            ic = triton.testing.do_bench(lambda: compiled(x, r, w, b))
            g_ours = triton.testing.do_bench_cudagraph(call)
            g_pt = triton.testing.do_bench_cudagraph(lambda: eager(x, r, w, b))
            g_ic = triton.testing.do_bench_cudagraph(lambda: compiled(x, r, w, b))
            nbytes = (4 * n * c + (2 if kind == "add_layernorm" else 1) * c) * 2
            gbps = nbytes / (ours * 1e-3) / 1e9
            g_gbps = nbytes / (g_ours * 1e-3) / 1e9
            rows.append({"kind": kind, "shape": label, "rows": n, "cols": c, "ours_us": ours * 1e3,
                         "eager_us": pt * 1e3, "compile_us": ic * 1e3, "ours_gbps": gbps,
                         "ours_copy_pct": 100 * gbps / copy, "copy_gbps": copy,
                         "graphed_ours_us": g_ours * 1e3, "graphed_eager_us": g_pt * 1e3,
                         "graphed_compile_us": g_ic * 1e3, "graphed_ours_copy_pct": 100 * g_gbps / copy})
            row = rows[-1]
            print(f"| {kind} | {label} ({n}×{c}) | {row['ours_us']:.2f} | {row['eager_us']:.2f} | "
                  f"{row['compile_us']:.2f} | {pt / ours:.2f}× | {ic / ours:.2f}× | {gbps:.0f} | "
                  f"{row['ours_copy_pct']:.0f}% | {g_ours * 1e3:.2f} | {g_pt * 1e3:.2f} | {g_ic * 1e3:.2f} | "
                  f"{g_pt / g_ours:.2f}× | {g_ic / g_ours:.2f}× | {100 * g_gbps / copy:.0f}% |", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
