"""An independent timing of KernelBench-format problems, written the way KernelBench times
(CUDA events around each trial, the L2 flushed before each, warm-up calls discarded), to
set beside `autokernel bench --problem` (docs/benchmarks.md, "Problems in KernelBench's
format"). It shares no code with the judge.

For each problem stem of examples/problems/ it writes a copy with every size constant of
at least 16 multiplied by --scale to --out (the judge then reads that copy), and times the
reference Model eager, torch.compile of it, and tests/problems/<stem>/correct.py's ModelNew,
built under one seed as KernelBench builds them. Prints one JSON line per problem.

Usage (one GPU, from the repository root):
    python3 benches/gpu/problem_timing.py --scale 16 --out /tmp/p 01_relu 06_softmax
"""

import argparse
import importlib.util
import json
import re
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def scaled_copy(stem, scale, out):
    """examples/problems/<stem>.py with `name = int` lines (int ≥ 16) times `scale`."""
    text = (ROOT / "examples/problems" / f"{stem}.py").read_text()

    def grow(m):
        value = int(m.group(2))
        return f"{m.group(1)}{value * scale if value >= 16 else value}"

    text = re.sub(r"^([A-Za-z_]\w*\s*=\s*)(\d+)\s*$", grow, text, flags=re.M)
    path = out / f"{stem}.py"
    path.write_text(text)
    return path


def module_of(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def time_ms(fn, inputs, trials, flush):
    """Per-trial times (ms) of fn(*inputs): 5 warm-ups, then each trial after an L2 flush."""
    with torch.no_grad():
        for _ in range(5):
            fn(*inputs)
        torch.cuda.synchronize()
        times = []
        for _ in range(trials):
            flush.zero_()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stems", nargs="+")
    ap.add_argument("--scale", type=int, default=16)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--trials", type=int, default=100)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    for stem in args.stems:
        problem = module_of(scaled_copy(stem, args.scale, args.out), f"p_{stem}")
        cand = module_of(ROOT / "tests/problems" / stem / "correct.py", f"c_{stem}")
        torch.manual_seed(42)
        init = problem.get_init_inputs()
        torch.manual_seed(42)
        ref = problem.Model(*init).cuda()
        torch.manual_seed(42)
        new = cand.ModelNew(*init).cuda()
        torch.manual_seed(42)
        inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
        row = {"problem": stem, "scale": args.scale}
        for name, fn in (("eager", ref), ("compiled", torch.compile(ref)), ("model_new", new)):
            t = time_ms(fn, inputs, args.trials, flush)
            row[f"{name}_median_us"] = statistics.median(t) * 1e3
            row[f"{name}_mean_us"] = statistics.fmean(t) * 1e3
            row[f"{name}_std_us"] = statistics.pstdev(t) * 1e3
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
