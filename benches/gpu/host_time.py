"""Host time of one kernel call, per kind: the starter's kernel_fn called directly, the same
kernel through kernel_ops' cached launcher, through its registered operator
(torch.ops.autokernel.<kind>, eager, through the dispatcher), through the operator's
``KernelOp`` as a plug calls it (eager: its direct path, past the dispatcher), and PyTorch's
own eager op beside them, in µs, with the ratios to kernel_fn, all in one run (issue 20,
point 1; docs/deploy.md).

Usage (repository root; OPS_DIR holds kernel_ops.py, catalogue.py and catalogue.json, as
`cargo run --example kernel_ops_files -- OPS_DIR` writes them):

    python3 benches/gpu/host_time.py OPS_DIR                      # CUDA, float16
    python3 benches/gpu/host_time.py OPS_DIR --device cpu --calls 2 --rounds 1   # smoke test

Each kind runs at its catalogue tiny shape, where a kernel's GPU time is a few µs and the
host sets the pace. A figure is the wall time of `--calls` calls in a plain loop (the GPU
synchronised before and after, not inside), divided by the calls; the five ways are timed
in turns, round after round, and each reports its median over the rounds, so that drift of
a shared host falls on all of them alike. Before timing, each way's output is checked
against kernel_fn's (bit for bit for the launcher and the operator's two paths). On the CPU
the kernels run in Triton's interpreter (TRITON_INTERPRET=1, set here), the operator with
kernel_ops.force_kernel(), and the figures only show that the script runs.

Where the launcher's time goes, for each kind whose launcher replays (a second table):
`replay` is the recorded plan run without the cache key and lookup, `launches` only its
Triton launches on tensors allocated once (no allocation), `triton_run` Triton's own
`CompiledKernel.run` with every argument built beforehand (the floor of a launch from
Python; GPU only), `empty` the plan's allocations alone (`torch.empty_strided`). These read
the launcher's private plan (`Launcher._plans`): a benchmark of its parts, not an API.

Prints Markdown tables on stdout (the ones docs/benchmarks.md keeps); `--json PATH` also
writes one object per kind.
"""

import argparse
import json
import os
import statistics
import sys
import time

KINDS = ["matmul", "softmax", "layernorm", "rmsnorm", "flash_attention", "fused_mlp", "cross_entropy",
         "rotary_embedding", "reduce"]
WAYS = ["kernel_fn", "launcher", "operator", "op_call", "pytorch"]
PARTS = ["replay", "launches", "triton_run", "empty"]


def launcher_parts(torch, launcher, tensors):
    """{part: callable} timing the pieces of one replayed call (module docstring), or {}
    when the launcher holds no plan for these tensors."""
    plan = launcher._plans.get(launcher.key(tensors))
    if plan is None or not hasattr(plan, "replay"):
        return {}
    env = list(tensors)
    allocs = []
    for ev in plan.events:
        if ev[0] == "alloc":
            _, _, size, stride, dtype, device, _ = ev
            allocs.append((size, stride, dtype, device))
            env.append(torch.empty_strided(size, stride, dtype=dtype, device=device))
    launches = [ev[1] for ev in plan.events if ev[0] == "launch"]

    def run_launches():
        for launch in launches:
            launch(env)

    def run_empty():
        for size, stride, dtype, device in allocs:
            torch.empty_strided(size, stride, dtype=dtype, device=device)

    parts = {"replay": lambda: plan.replay(tensors), "launches": run_launches, "empty": run_empty}
    compiled = [la for la in launches if la.compiled is not None]
    if compiled:
        # every argument built once: what is left is Triton's C launcher and its packing
        calls = []
        for la in compiled:
            args = list(la.args)
            for i, get in la.dyn:
                args[i] = get(env)
            stream = la.get_stream(la.device)
            calls.append((la.run, (la.g0, la.g1, la.g2, stream, la.function, la.packed, None, None, None, *args)))

        def run_triton():
            for run, args in calls:
                run(*args)
        parts["triton_run"] = run_triton
    return parts


def parse_args():
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ops_dir", help="folder with kernel_ops.py, catalogue.py, catalogue.json")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--calls", type=int, default=500, help="calls per timing (default 500)")
    p.add_argument("--rounds", type=int, default=7, help="timing rounds (default 7)")
    p.add_argument("--kinds", default=",".join(KINDS), help="comma-separated kinds (default: all)")
    p.add_argument("--starters", default=os.path.join(root, "autokernel-bench/python/starters"))
    p.add_argument("--json", help="also write the figures as JSON lines to this file")
    return p.parse_args()


def main():
    args = parse_args()
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported
    sys.path.insert(0, args.ops_dir)
    import contextlib

    import torch

    import kernel_ops

    cat = kernel_ops.catalogue_module()
    cat.patch_triton_interpreter()
    on_gpu = args.device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        raise SystemExit("--device cuda, but torch sees no CUDA device")
    dtype = torch.float16 if on_gpu else torch.float32
    forced = contextlib.nullcontext() if on_gpu else kernel_ops.force_kernel()

    def host_us(fn):
        if on_gpu:
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn()
        t1 = time.perf_counter()
        if on_gpu:
            torch.cuda.synchronize()
        return (t1 - t0) * 1e6 / args.calls

    rows = []
    with forced:
        for kind in args.kinds.split(","):
            op = kernel_ops.register(os.path.join(args.starters, f"{kind}.py"))
            shape = cat.spec(kind)["tiny_shape"]
            inputs = cat.make_inputs(kind, shape, dtype, args.device, 0)
            tensors = tuple(inputs.values())
            ways = {
                "kernel_fn": lambda: op.module.kernel_fn(**inputs),
                "launcher": lambda: op.launcher(*tensors),
                "operator": lambda: op.overload(*tensors),
                "op_call": lambda: op(*tensors),
                "pytorch": lambda: cat.eager(kind, inputs),
            }
            want = ways["kernel_fn"]()
            for way in ("launcher", "operator", "op_call"):
                for _ in range(2):  # the first call at the key records, the second replays
                    got = ways[way]()
                    if not torch.equal(got, want):
                        raise SystemExit(f"{kind}: the {way} gave another output than kernel_fn")
            replayed = op.launcher.replays > 0 and not op.launcher.reasons
            parts = launcher_parts(torch, op.launcher, tensors) if replayed else {}
            ways.update({f"part:{p}": fn for p, fn in parts.items()})
            times = {w: [] for w in ways}
            for _ in range(args.rounds):
                for w in ways:
                    times[w].append(host_us(ways[w]))
            us = {w: statistics.median(t) for w, t in times.items()}
            part_us = {p: us.get(f"part:{p}") for p in PARTS}
            row = {"kind": kind, "shape": shape, "dtype": str(dtype).replace("torch.", ""),
                   "device": torch.cuda.get_device_name() if on_gpu else "cpu (interpreter)",
                   "replayed": replayed, "reasons": [str(r) for r in op.launcher.reasons.values()],
                   "calls": args.calls, "rounds": args.rounds, **{f"{w}_us": us[w] for w in WAYS},
                   "parts_us": part_us}
            rows.append(row)
            print(f"{kind}: " + ", ".join(f"{w} {us[w]:.1f} µs" for w in WAYS), file=sys.stderr)

    print(f"| kind, tiny shape | kernel_fn | cached launcher | operator (dispatcher) | KernelOp call (direct) | "
          f"PyTorch eager | launcher / kernel_fn | operator / kernel_fn | direct / kernel_fn |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        note = "" if r["replayed"] else " (not replayed: calls kernel_fn)"
        print(f"| {r['kind']} {'×'.join(map(str, r['shape']))}{note} | {r['kernel_fn_us']:.1f} µs | "
              f"{r['launcher_us']:.1f} µs | {r['operator_us']:.1f} µs | {r['op_call_us']:.1f} µs | "
              f"{r['pytorch_us']:.1f} µs | {r['launcher_us'] / r['kernel_fn_us']:.2f} | "
              f"{r['operator_us'] / r['kernel_fn_us']:.2f} | {r['op_call_us'] / r['kernel_fn_us']:.2f} |")
    print()
    print("| kind | launcher | replay (no key) | launches only | Triton's run alone | allocations alone |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        p = r["parts_us"]
        cell = lambda v: "—" if v is None else f"{v:.1f} µs"  # noqa: E731
        print(f"| {r['kind']} | {r['launcher_us']:.1f} µs | {cell(p['replay'])} | {cell(p['launches'])} | "
              f"{cell(p['triton_run'])} | {cell(p['empty'])} |")
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
