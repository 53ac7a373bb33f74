"""Checks every starter kernel against the catalogue's references on the CPU (Triton's
interpreter), the way the bench worker's correctness stages do.

    TRITON_INTERPRET=1 python autokernel-bench/python/tests/check_starters.py [--kinds a,b] [--combos N]

For each kind: every `cpu` and `edge` shape (copied from autokernel-core/src/kernel.rs and
checked against it when that file is found) × float32, float16 × every input mode, with
`KernelKind::tolerance` (elementwise atol/rtol plus relative L2); the loop path for wide
rows (MAX_ROW_BLOCK forced small); a few random TUNABLES combinations; bitwise
determinism over three runs; inputs left unchanged. Prints the time per kind; exits 1 on
any failure. No pytest needed.
"""

import argparse
import importlib.util
import itertools
import os
import random
import re
import sys
import time
import warnings
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported

import torch  # noqa: E402

HERE = Path(__file__).resolve().parent
PYDIR = HERE.parent
sys.path.insert(0, str(PYDIR))
sys.path.insert(0, str(HERE))
import catalogue  # noqa: E402

catalogue.patch_triton_interpreter()
from judge import compare, tolerance  # noqa: E402,F401
# The interpreter's numpy exp overflows to inf for sigmoid(-large) (correctly giving 0).
warnings.filterwarnings("ignore", category=RuntimeWarning)

from check_starters_shapes import CPU, EDGE  # noqa: E402


def rust_shapes(kernel_rs: Path):
    """Parses the cpu and edge sets out of KernelKind::shapes (to catch drift)."""
    text = kernel_rs.read_text()
    camel = {k: "".join(p.title() for p in k.split("_")) for k in catalogue.KINDS}
    out = {"Cpu": {}, "Edge": {}}
    pat = re.compile(r"\(((?:KernelKind::\w+\s*\|?\s*)+),\s*ShapeSet::(\w+)\)\s*=>\s*\{?\s*&\[(.*?)\]\s*,?\s*\}?\s*,?\n", re.S)
    for kinds, set_name, body in pat.findall(text):
        if set_name not in out:
            continue
        shapes = [[int(v) for v in s.split(",")] for s in re.findall(r"&\[([\d,\s]+)\]", body)]
        for k, c in camel.items():
            if f"KernelKind::{c}" in kinds:
                out[set_name][k] = shapes
    return out


def load(kind):
    path = PYDIR / "starters" / f"{kind}.py"
    spec = importlib.util.spec_from_file_location(f"starter_{kind}_{time.monotonic_ns()}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.KERNEL_KIND == kind, (mod.KERNEL_KIND, kind)
    config_lines = [l for l in path.read_text().splitlines() if l.startswith("CONFIG = ")]
    assert len(config_lines) == 1, "CONFIG must be on one line"
    for key, val in mod.CONFIG.items():
        assert key in mod.TUNABLES and val in mod.TUNABLES[key], f"CONFIG {key}={val} not in TUNABLES"
    return mod


def run_case(mod, kind, shape, dtype, mode, seed=0):
    inputs = catalogue.make_inputs(kind, shape, dtype, "cpu", seed, mode)
    ref = catalogue.reference(kind, inputs)
    copies = {k: v.clone() for k, v in inputs.items()}
    out = mod.kernel_fn(**copies)
    for k in inputs:
        if not torch.equal(inputs[k], copies[k]):
            return out, f"input {k} was modified"
    return out, compare(kind, out, ref, inputs, dtype)


def check_kind(kind, n_combos, rng):
    failures = []
    mod = load(kind)
    cases = 0
    dtypes = [torch.float32, torch.float16]
    shapes = CPU[kind] + EDGE[kind]
    # shape sweep × stability modes
    for shape, dtype, mode in itertools.product(shapes, dtypes, catalogue.modes(kind)):
        cases += 1
        _, err = run_case(mod, kind, shape, dtype, mode, seed=cases)
        if err:
            failures.append(f"{kind} {shape} {dtype} {mode}: {err}")
    # determinism: three runs bitwise equal
    for dtype in dtypes:
        inputs = catalogue.make_inputs(kind, EDGE[kind][0], dtype, "cpu", 7, "normal")
        outs = [mod.kernel_fn(**{k: v.clone() for k, v in inputs.items()}) for _ in range(3)]
        cases += 3
        if not all(torch.equal(outs[0], o) for o in outs[1:]):
            failures.append(f"{kind} {EDGE[kind][0]} {dtype}: not bitwise deterministic")
    # the loop path of row kernels (rows wider than MAX_ROW_BLOCK)
    if hasattr(mod, "MAX_ROW_BLOCK"):
        saved = mod.MAX_ROW_BLOCK
        mod.MAX_ROW_BLOCK = 64
        for shape, dtype, mode in itertools.product(EDGE[kind], dtypes, ["normal", "large", "mixed"]):
            cases += 1
            _, err = run_case(mod, kind, shape, dtype, mode, seed=cases)
            if err:
                failures.append(f"{kind} {shape} {dtype} {mode} (loop path): {err}")
        mod.MAX_ROW_BLOCK = saved
    # masked rows walked in chunks shorter than their masked runs (an online max that
    # starts at -inf must not turn the row into NaN); cross-entropy's odd widths (77) take
    # the aligned-chunk kernel, on ODD_BLOCK_N
    chunk_keys = {"softmax": ["LOOP_BLOCK"], "cross_entropy": ["BLOCK_N", "ODD_BLOCK_N"]}.get(kind, [])
    if chunk_keys:
        saved_config, saved_block = dict(mod.CONFIG), getattr(mod, "MAX_ROW_BLOCK", None)
        mod.CONFIG.update({key: 64 for key in chunk_keys})
        if saved_block is not None:
            mod.MAX_ROW_BLOCK = 64
        for shape, dtype in itertools.product(EDGE[kind], dtypes):
            cases += 1
            _, err = run_case(mod, kind, shape, dtype, "masked", seed=cases)
            if err:
                failures.append(f"{kind} {shape} {dtype} masked, chunks of 64: {err}")
        mod.CONFIG.clear()
        mod.CONFIG.update(saved_config)
        if saved_block is not None:
            mod.MAX_ROW_BLOCK = saved_block
    # random TUNABLES combinations
    saved = dict(mod.CONFIG)
    keys = sorted(mod.TUNABLES)
    for _ in range(n_combos):
        combo = {k: rng.choice(mod.TUNABLES[k]) for k in keys}
        mod.CONFIG.update(combo)
        for shape in [EDGE[kind][0], CPU[kind][-1]]:
            for dtype in dtypes:
                cases += 1
                _, err = run_case(mod, kind, shape, dtype, "normal", seed=cases)
                if err:
                    failures.append(f"{kind} {shape} {dtype} CONFIG={combo}: {err}")
    mod.CONFIG.clear()
    mod.CONFIG.update(saved)
    return cases, failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(catalogue.KINDS))
    ap.add_argument("--combos", type=int, default=3, help="random TUNABLES combinations per kind")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    kernel_rs = PYDIR.parent.parent / "autokernel-core" / "src" / "kernel.rs"
    if kernel_rs.exists():
        parsed = rust_shapes(kernel_rs)
        for k in catalogue.KINDS:
            assert parsed["Cpu"].get(k) == CPU[k], f"cpu shapes of {k} drifted from kernel.rs: {parsed['Cpu'].get(k)}"
            assert parsed["Edge"].get(k) == EDGE[k], f"edge shapes of {k} drifted from kernel.rs: {parsed['Edge'].get(k)}"

    rng = random.Random(args.seed)
    all_failures = []
    total = time.perf_counter()
    for kind in args.kinds.split(","):
        t0 = time.perf_counter()
        cases, failures = check_kind(kind, args.combos, rng)
        dt = time.perf_counter() - t0
        print(f"{kind:18s} {cases:4d} runs {dt:6.1f} s  {'ok' if not failures else f'{len(failures)} FAILED'}", flush=True)
        for f in failures[:20]:
            print("   ", f)
        all_failures += failures
    print(f"total {time.perf_counter() - total:.1f} s, {len(all_failures)} failures")
    return 1 if all_failures else 0


if __name__ == "__main__":
    sys.exit(main())
