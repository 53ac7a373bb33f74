"""GPU check that every TUNABLES combination of the given starters compiles and is correct
(float32 and float16, an edge shape and a cpu shape): shared-memory fitting of deep
pipelines is only exercised on a real GPU.

    python autokernel-bench/python/tests/gpu_combos.py [--kinds matmul,flash_attention,fused_mlp]
"""

import argparse
import importlib.util
import itertools
import sys
import time
from pathlib import Path

import torch

PYDIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PYDIR))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import catalogue  # noqa: E402
from check_starters_shapes import EDGE  # noqa: E402
from judge import compare  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="flash_attention,matmul,fused_mlp")
    args = ap.parse_args()
    catalogue.apply_precision_policy()
    bad = 0
    for kind in args.kinds.split(","):
        path = PYDIR / "starters" / f"{kind}.py"
        spec = importlib.util.spec_from_file_location(f"combo_{kind}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        keys = sorted(mod.TUNABLES)
        t0 = time.time()
        n = 0
        for values in itertools.product(*(mod.TUNABLES[k] for k in keys)):
            mod.CONFIG.update(dict(zip(keys, values)))
            # head_dim 128 in float32 is the largest shared-memory footprint of attention
            shapes = [[1, 2, 130, 128]] if kind == "flash_attention" else [EDGE[kind][0]]
            for shape in shapes:
                for dtype in [torch.float32, torch.float16]:
                    n += 1
                    i = catalogue.make_inputs(kind, shape, dtype, "cuda", n, "normal")
                    try:
                        out = mod.kernel_fn(**i)
                        err = compare(kind, out, catalogue.reference(kind, i), i, dtype)
                    except Exception as e:  # noqa: BLE001
                        err = f"{type(e).__name__}: {str(e)[:300]}"
                    if err:
                        bad += 1
                        print(f"FAIL {kind} {dict(zip(keys, values))} {shape} {dtype}: {err}", flush=True)
        print(f"{kind}: {n} runs in {time.time() - t0:.0f} s", flush=True)
    print(f"{bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
