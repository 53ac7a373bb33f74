"""Checks the starter kernels' paths the judge's own run of each starter does not reach, by
judging variants of them through `autokernel bench --json` on the CPU (Triton's
interpreter): the wide-row loop of the row starters (MAX_ROW_BLOCK forced to 64), masked
rows walked in chunks shorter than their -inf runs (softmax's LOOP_BLOCK, cross-entropy's
BLOCK_N and ODD_BLOCK_N at 64), a few random TUNABLES combinations (`--quick`), and
the matmul starter with a bias and in the b_transposed layout (`--quick`, EXTRA_RUNS).

    python autokernel-bench/python/tests/check_starters.py [--kinds a,b] [--combos N] [--autokernel PATH]

Also checks each starter's contract statically: KERNEL_KIND names its file, CONFIG is one
line and every value is among its TUNABLES. Prints one line per kind and a total line
ending in ", N failures"; exits 1 on any failure. The starters themselves are judged by
the bench crate's `every_starter_passes_all_stages_on_the_cpu`.
"""

import argparse
import ast
import random
import re
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STARTERS = HERE.parent / "starters"
sys.path.insert(0, str(HERE))
from bench_cli import judge  # noqa: E402

# Kinds whose masked rows are walked in chunks, and the CONFIG keys of those chunks.
CHUNK_KEYS = {"softmax": ["LOOP_BLOCK"], "cross_entropy": ["BLOCK_N", "ODD_BLOCK_N"]}
# `bench` options a kind's starter is also judged with, beyond its defaults: matmul's bias
# epilogue and the layouts models hand over (Conv1D contiguous, nn.Linear b_transposed),
# fused_mlp's GeGLU activation, rotary_embedding's half-split pairing.
EXTRA_RUNS = {
    "matmul": [
        ("--param", "has_bias=true"),
        ("--layout", "b_transposed"),
        ("--param", "has_bias=true", "--layout", "b_transposed"),
    ],
    # the GeGLU gate (the tanh GELU) as well as SwiGLU's SiLU
    "fused_mlp": [("--param", "activation=gelu_tanh")],
    # HF's rotate_half pairing as well as the interleaved one
    "rotary_embedding": [("--param", "pairing=half_split")],
}


def literal(source, name):
    """The value of the top-level `name = <literal>` of `source` (None when absent)."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def with_line(source, name, value):
    """`source` with its one top-level `name = ...` line set to `value`."""
    new, n = re.subn(rf"^{name} = .*$", f"{name} = {value!r}", source, count=1, flags=re.M)
    assert n == 1, f"no one-line `{name} = ...`"
    return new


def contract_problems(kind, source):
    problems = []
    if literal(source, "KERNEL_KIND") != kind:
        problems.append(f"{kind}: KERNEL_KIND is {literal(source, 'KERNEL_KIND')!r}")
    if len(re.findall(r"^CONFIG = ", source, flags=re.M)) != 1 or "\n" in str(literal(source, "CONFIG")):
        problems.append(f"{kind}: CONFIG must be on one line")
    config, tunables = literal(source, "CONFIG") or {}, literal(source, "TUNABLES") or {}
    for key, val in config.items():
        if val not in tunables.get(key, []):
            problems.append(f"{kind}: CONFIG {key}={val} not in TUNABLES")
    return problems


def variants(kind, source, n_combos, rng):
    """(label, source, quick, extra `bench` options) of each variant of `kind`'s starter."""
    out = [(" ".join(extra), source, True, extra) for extra in EXTRA_RUNS.get(kind, [])]
    out += [(label, src, quick, ()) for label, src, quick in _source_variants(kind, source, n_combos, rng)]
    return out


def _source_variants(kind, source, n_combos, rng):
    """(label, source, quick) of each edited copy of `kind`'s starter."""
    out = []
    if literal(source, "MAX_ROW_BLOCK") is not None:
        out.append(("loop path", with_line(source, "MAX_ROW_BLOCK", 64), False))
    if kind in CHUNK_KEYS:
        config = dict(literal(source, "CONFIG"), **{k: 64 for k in CHUNK_KEYS[kind]})
        src = with_line(source, "CONFIG", config)
        if literal(source, "MAX_ROW_BLOCK") is not None:
            src = with_line(src, "MAX_ROW_BLOCK", 64)
        out.append(("masked rows in chunks of 64", src, False))
    tunables = literal(source, "TUNABLES")
    for i in range(n_combos):
        combo = {k: rng.choice(v) for k, v in sorted(tunables.items())}
        out.append((f"CONFIG={combo}", with_line(source, "CONFIG", dict(literal(source, "CONFIG"), **combo)), True))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(sorted(p.stem for p in STARTERS.glob("*.py"))))
    ap.add_argument("--combos", type=int, default=2, help="random TUNABLES combinations per kind")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--autokernel", help="the autokernel binary (default: $AUTOKERNEL_BIN, target/debug)")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    failures, runs = [], 0
    total = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            t0 = time.perf_counter()
            source = (STARTERS / f"{kind}.py").read_text()
            problems = contract_problems(kind, source)
            todo = variants(kind, source, args.combos, rng)
            # one warm worker per (quick, options) batch
            for j, (quick, extra) in enumerate(dict.fromkeys((q, e) for _, _, q, e in todo)):
                batch = [(label, src) for label, src, q, e in todo if (q, e) == (quick, extra)]
                paths = []
                for i, (label, src) in enumerate(batch):
                    p = Path(tmp) / f"{kind}_{j}_{i}.py"
                    p.write_text(src)
                    paths.append(p)
                for (label, _), r in zip(batch, judge(paths, quick=quick, exe=args.autokernel, extra=extra)):
                    runs += 1
                    if r["correctness"] != "PASS":
                        problems.append(f"{kind} ({label}): {r['correctness']} in {r['failed_stage']}: {r['reason']}")
            dt = time.perf_counter() - t0
            status = "ok" if not problems else f"{len(problems)} FAILED"
            print(f"{kind:18s} {len(todo):3d} variants {dt:6.1f} s  {status}", flush=True)
            for f in problems[:20]:
                print("   ", f)
            failures += problems
    print(f"total {time.perf_counter() - total:.1f} s, {runs} runs, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
