"""Times a whole model's forward in the modes people deploy, side by side in one run, and
checks each mode's output against eager.

Modes: `eager`; `cudagraph` (eager captured into a CUDA graph and replayed); `compile`
(torch.compile, default mode); `compile-ro` (torch.compile, mode="reduce-overhead").
Every mode is timed alike: a plain loop of `--forwards` forwards and one synchronize
(docs/gpu.md says why not do_bench for a host-paced forward), in `--rounds` interleaved
rounds (each round times every mode once, so that a drifting host weighs on all alike);
the median round is reported, with the fastest and slowest. After the timing, one more
forward of each mode runs under torch.profiler to count its GPU kernel launches (CUPTI's
records, a graph replay counting every kernel it holds; copies and memsets left out).

Honest graphs: the graph is captured after a warm-up on a side stream, its input is a
static tensor filled before each replay, its output is copied out after the replay and
compared with eager's; no mode reuses another mode's outputs.

Usage (GPU; from the repository root):
  python benches/gpu/deploy_modes.py --hf GPT2LMHeadModel --input-shape 1,1024
  python benches/gpu/deploy_modes.py --hf LlamaForCausalLM \\
      --config '{"hidden_size":768,"intermediate_size":2048,"num_hidden_layers":12,"num_attention_heads":12,"num_key_value_heads":12,"vocab_size":32000}' \\
      --input-shape 1,512
  python benches/gpu/deploy_modes.py --hf BertModel --input-shape 8,512
  python benches/gpu/deploy_modes.py --example llama          # examples/models/llama.py
  python benches/gpu/deploy_modes.py --example tiny --device cpu --modes eager,compile  # smoke
  python benches/gpu/deploy_modes.py --hf GPT2LMHeadModel --input-shape 1,1024 --package gpt2-kernels
One JSON line per model on stdout (and appended to --out), a table on stderr.

--package DIR (a folder `autokernel export` wrote; imported from there, no pip needed) adds
each mode again with autokernel's kernels (`eager+ak`, `cudagraph+ak`, ...): a second
instance of the model built with the same seed, `optimize`d by the package, timed in the
same rounds and checked against the same eager output.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

import torch

MODES = ["eager", "cudagraph", "compile", "compile-ro"]
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def build(args, device, dtype):
    """The model (eval, on `device` in `dtype`) and its input ids, random weights."""
    shape = [int(d) for d in args.input_shape.split(",")] if args.input_shape else None
    if args.hf:
        import transformers

        cls = getattr(transformers, args.hf)
        config_cls = cls.config_class
        config = config_cls(**json.loads(args.config or "{}"))
        model = cls(config)
        vocab = getattr(config, "vocab_size", 1000)
    else:
        path = os.path.join(REPO, "examples", "models", f"{args.example}.py")
        spec = importlib.util.spec_from_file_location(f"example_{args.example}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        example = module.EXAMPLE
        kwargs = example.get("kwargs", {}) | json.loads(args.config or "{}")
        model = getattr(module, example["class"])(**kwargs)
        shape = shape or example["input_shape"]
        vocab = kwargs.get("vocab", kwargs.get("vocab_size", 1000))
    if not shape:
        sys.exit("--input-shape is needed for a transformers model, e.g. 1,1024")
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, shape, generator=g).to(device)
    return model.to(device=device, dtype=dtype).eval(), ids


def first_tensor(out):
    """The first tensor of a model's output (logits, last hidden state)."""
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    for o in out:
        t = first_tensor(o) if not isinstance(o, torch.Tensor) else o
        if t is not None:
            return t
    return None


def load_package(folder):
    """The package `autokernel export` wrote into `folder`, imported from there."""
    names = [d for d in os.listdir(folder) if os.path.exists(os.path.join(folder, d, "manifest.json"))]
    if len(names) != 1:
        sys.exit(f"{folder} holds no exported package (a subfolder with manifest.json)")
    sys.path.insert(0, os.path.abspath(folder))
    import importlib

    return importlib.import_module(names[0])


def make_modes(model, ids, modes, device, suffix=""):
    """name -> a function running one forward of that mode and returning its output tensor.
    Compiling and capturing happen here, before any timing."""
    forward = lambda x: first_tensor(model(x))  # noqa: E731
    out = {}
    for name in modes:
        # a second model instance gets compiled graphs of its own (dynamo traces it anew:
        # its plugs' Python runs while tracing, seen on the CPU with the tiny example)
        mode, out_name = name, name + suffix
        print(f"  {out_name}: preparing", file=sys.stderr, flush=True)
        if mode == "eager":
            out[out_name] = lambda: forward(ids)
        elif mode == "cudagraph":
            if device != "cuda":
                continue
            static_in = ids.clone()
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(3):
                    forward(static_in)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = forward(static_in)

            def replay(graph=graph, static_in=static_in, static_out=static_out):
                static_in.copy_(ids)
                graph.replay()
                return static_out

            out[out_name] = replay
        elif mode in ("compile", "compile-ro"):
            kw = {"mode": "reduce-overhead"} if mode == "compile-ro" else {}
            compiled = torch.compile(model, **kw)
            t0 = time.perf_counter()
            for _ in range(3):  # compile, then warm (reduce-overhead records its graphs)
                first_tensor(compiled(ids))
            if device == "cuda":
                torch.cuda.synchronize()
            print(f"  {out_name}: compiled and warmed in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            out[out_name] = lambda compiled=compiled: first_tensor(compiled(ids)).clone()
    return out


def time_ms(run, forwards, device):
    """Milliseconds per forward over a plain loop of `forwards` forwards, one synchronize."""
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(forwards):
        run()
    if device == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) * 1e3 / forwards


def launches(run, device):
    """GPU kernels one call of `run` launches (None off a GPU), counted as the profile and
    verification count them (``call_sites.kernel_launches``)."""
    if device != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile

    sys.path.insert(0, os.path.join(REPO, "autokernel-profiler", "python"))
    from call_sites import kernel_launches

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    return kernel_launches(prof)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--hf", help="a transformers class, e.g. GPT2LMHeadModel (random weights from its config)")
    src.add_argument("--example", help="a bundled example model: tiny, gpt2, llama, bert")
    p.add_argument("--config", help="config (transformers) or constructor (example) keyword arguments, JSON")
    p.add_argument("--input-shape", help="token-id input shape, e.g. 1,1024")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--device", default="cuda")
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--forwards", type=int, default=20)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", help="a JSON-lines file to append the result to")
    p.add_argument("--package", help="a folder `autokernel export` wrote: each mode again with its kernels")
    p.add_argument("--watchdog-s", type=float, default=0,
                   help="after this many seconds, print every thread's stack and exit (0: never)")
    args = p.parse_args()
    if args.watchdog_s > 0:
        import faulthandler

        faulthandler.dump_traceback_later(args.watchdog_s, exit=True)
    device, dtype = args.device, getattr(torch, args.dtype)
    modes = [m for m in args.modes.split(",") if m]
    unknown = set(modes) - set(MODES)
    if unknown:
        sys.exit(f"unknown mode(s) {sorted(unknown)}; expected some of {MODES}")
    torch.manual_seed(0)
    with torch.no_grad():
        model, ids = build(args, device, dtype)
        reference = first_tensor(model(ids)).float().clone()
        runs = make_modes(model, ids, modes, device)
        installed = None
        if args.package:
            package = load_package(args.package)
            torch.manual_seed(0)
            optimized, _ = build(args, device, dtype)
            report = package.optimize(optimized)
            installed = report.to_dict()
            runs.update(make_modes(optimized, ids, modes, device, suffix="+ak"))
        times = {m: [] for m in runs}
        for r in range(args.rounds):
            print(f"  timing round {r + 1} of {args.rounds}", file=sys.stderr, flush=True)
            for mode, run in runs.items():
                run()  # one untimed forward: the loop starts warm
                times[mode].append(time_ms(run, args.forwards, device))
        # each mode's own output, produced after the timing, against eager's
        errors = {}
        for mode, run in runs.items():
            got = run().float()
            scale = reference.abs().max().item() or 1.0
            errors[mode] = (got - reference).abs().max().item() / scale
        counted = {mode: launches(run, device) for mode, run in runs.items()}
    name = args.hf or f"example {args.example}"
    result = {
        "model": name,
        "config": json.loads(args.config or "{}"),
        "input_shape": list(ids.shape),
        "dtype": args.dtype,
        "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
        "torch": torch.__version__,
        "forwards": args.forwards,
        "rounds": args.rounds,
        "ms": {m: statistics.median(t) for m, t in times.items()},
        "ms_range": {m: [min(t), max(t)] for m, t in times.items()},
        "max_rel_error_vs_eager": errors,
        "launches_per_forward": counted,
        "package": installed,
    }
    print(f"{name} {list(ids.shape)} {args.dtype} on {result['device']}", file=sys.stderr)
    for m in times:
        lo, hi = result["ms_range"][m]
        print(f"  {m:11s} {result['ms'][m]:8.3f} ms  [{lo:.3f}–{hi:.3f}]  "
              f"max |Δ|/max|eager| {errors[m]:.2e}  launches {counted[m]}", file=sys.stderr)
    line = json.dumps(result)
    print(line)
    if args.out:
        with open(args.out, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
