"""GPU check that every TUNABLES combination of the given starters compiles and passes the
judge (`autokernel bench --json --device cuda --quick`): shared-memory fitting of deep
pipelines is only exercised on a real GPU. flash_attention is also judged at head_dim 128
(its largest shared-memory footprint in float32).

    python autokernel-bench/python/tests/gpu_combos.py [--kinds matmul,flash_attention,fused_mlp] [--autokernel PATH]

Prints each combination that does not PASS and a total; exits 1 on any.
"""

import argparse
import itertools
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from bench_cli import judge  # noqa: E402
from check_starters import literal, with_line  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default="flash_attention,matmul,fused_mlp")
    ap.add_argument("--autokernel", help="the autokernel binary (default: $AUTOKERNEL_BIN, target/debug)")
    args = ap.parse_args()
    bad = 0
    with tempfile.TemporaryDirectory() as tmp:
        for kind in args.kinds.split(","):
            source = (HERE.parent / "starters" / f"{kind}.py").read_text()
            config, tunables = literal(source, "CONFIG"), literal(source, "TUNABLES")
            keys = sorted(tunables)
            combos = [dict(zip(keys, v)) for v in itertools.product(*(tunables[k] for k in keys))]
            paths = []
            for i, combo in enumerate(combos):
                p = Path(tmp) / f"{kind}_{i}.py"
                p.write_text(with_line(source, "CONFIG", dict(config, **combo)))
                paths.append(p)
            extra = ["--shape", "1,2,130,128"] if kind == "flash_attention" else []
            t0 = time.time()
            for combo, r in zip(combos, judge(paths, device="cuda", quick=True, exe=args.autokernel, extra=extra)):
                if r["correctness"] != "PASS":
                    bad += 1
                    print(f"FAIL {kind} {combo}: {r['correctness']} {r['reason']}", flush=True)
            print(f"{kind}: {len(combos)} combinations in {time.time() - t0:.0f} s", flush=True)
    print(f"{bad} failures")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
