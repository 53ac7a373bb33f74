"""Where the time of a memory-bound starter goes at 4096x4096 fp16 (~67 MB moved, ~16 us at
the copy bandwidth): the same-size copy as the ceiling, the starter through do_bench (what
`autokernel bench` reports), the same call replayed from a CUDA graph (no Python or launch
cost on the host), and the host time of one kernel_fn call.
Usage: python3 launch_overhead.py STARTERS_DIR > launch_overhead.json
"""
import importlib.util
import json
import sys
import time

import torch
import triton.testing


def do_bench_us(fn):
    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")) * 1e3


def graph_us(fn, reps=50):
    """Mean device time per call of `reps` calls captured into one CUDA graph."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for _ in range(reps):
            fn()
    g.replay()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(5):
        start.record()
        g.replay()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) * 1e3 / reps)
    return best


def host_us(fn, calls=200):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) * 1e6 / calls


def load(path):
    spec = importlib.util.spec_from_file_location(path.rsplit("/", 1)[-1][:-3], path)
    m = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(m)
    return m


def main():
    d = sys.argv[1]
    out = {}
    for rows, cols in [(4096, 4096), (8192, 8192), (4096, 50257)]:
        x = torch.randn(rows, cols, dtype=torch.float16, device="cuda")
        y = torch.empty_like(x)
        mb = 2 * x.numel() * 2 / 1e6
        key = f"{rows}x{cols}"
        cp = do_bench_us(lambda: y.copy_(x))
        out[f"copy_{key}"] = {"do_bench_us": cp, "gb_s": mb * 1e3 / cp, "graph_us": graph_us(lambda: y.copy_(x))}
        w = torch.randn(cols, dtype=torch.float16, device="cuda")
        for kind, call in [("rmsnorm", lambda m: (lambda: m.kernel_fn(x, w))),
                           ("softmax", lambda m: (lambda: m.kernel_fn(x)))]:
            m = load(f"{d}/{kind}.py")
            fn = call(m)
            fn()
            entry = {"do_bench_us": do_bench_us(fn), "graph_us": graph_us(fn), "host_us": host_us(fn)}
            entry["pct_copy_do_bench"] = 100 * (mb * 1e3 / entry["do_bench_us"]) / 4244
            entry["pct_copy_graph"] = 100 * (mb * 1e3 / entry["graph_us"]) / 4244
            # the configurations nearby, through do_bench
            variants = {}
            for key2, values in m.TUNABLES.items():
                for v in values:
                    saved = dict(m.CONFIG)
                    m.CONFIG[key2] = v
                    try:
                        fn()
                        variants[f"{key2}={v}"] = round(do_bench_us(fn), 2)
                    except Exception as e:  # noqa: BLE001
                        variants[f"{key2}={v}"] = str(e)[:80]
                    m.CONFIG.clear()
                    m.CONFIG.update(saved)
            entry["variants_do_bench_us"] = variants
            out[f"{kind}_{key}"] = entry
        print(json.dumps(out), file=sys.stderr)
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
