"""GPU check of the starters at the `gpu` shapes: correctness (all modes, float16; normal
mode in bfloat16 and float32) and speed against PyTorch eager and the copy bandwidth,
with a one-sweep coordinate search over TUNABLES from CONFIG.

    python autokernel-bench/python/tests/gpu_bench.py [--kinds a,b] [--no-tune] [--out FILE]

Needs CUDA. Prints one line per measurement and writes JSON to --out.
"""

import argparse
import importlib.util
import json
import math
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
import triton

PYDIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(PYDIR))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import catalogue  # noqa: E402
from judge import compare  # noqa: E402

GPU = {
    "matmul": [[4096, 4096, 4096], [4096, 11008, 4096]],
    "softmax": [[4096, 4096], [8192, 8192], [4096, 50257]],
    "layernorm": [[4096, 4096], [8192, 8192]],
    "rmsnorm": [[4096, 4096], [8192, 8192]],
    "flash_attention": [[1, 32, 2048, 128]],
    "fused_mlp": [[2048, 4096, 11008]],
    "cross_entropy": [[4096, 50257], [4096, 32000]],
    "rotary_embedding": [[1, 32, 2048, 128]],
    "reduce": [[8192, 8192], [4096, 4096]],
}
COMPUTE = {"matmul", "flash_attention", "fused_mlp"}


def eager(kind, i):
    if kind == "matmul":
        return lambda: torch.mm(i["A"], i["B"])
    if kind == "softmax":
        return lambda: torch.softmax(i["x"], -1)
    if kind == "layernorm":
        return lambda: F.layer_norm(i["x"], (i["x"].shape[-1],), i["weight"], i["bias"], 1e-5)
    if kind == "rmsnorm":
        x, w = i["x"], i["weight"]
        return lambda: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w
    if kind == "flash_attention":
        return lambda: F.scaled_dot_product_attention(i["Q"], i["K"], i["V"], is_causal=True)
    if kind == "fused_mlp":
        x, g, u, d = i["x"], i["w_gate"], i["w_up"], i["w_down"]
        return lambda: (F.silu(x @ g.t()) * (x @ u.t())) @ d.t()
    if kind == "cross_entropy":
        return lambda: F.cross_entropy(i["logits"], i["targets"])
    if kind == "rotary_embedding":
        x, c, s = i["x"], i["cos"], i["sin"]
        def f():
            x0, x1 = x[..., 0::2], x[..., 1::2]
            return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), -1).flatten(-2)
        return f
    return lambda: i["x"].sum(-1)


def load(kind):
    path = PYDIR / "starters" / f"{kind}.py"
    spec = importlib.util.spec_from_file_location(f"gpu_{kind}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def bench(fn):
    return triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median") * 1e3  # us


def throughput(kind, shape, us):
    d = shape
    e = 2
    if kind == "matmul":
        return 2 * d[0] * d[1] * d[2] / us / 1e6  # TFLOP/s
    if kind == "flash_attention":
        return 2 * d[0] * d[1] * d[2] ** 2 * d[3] / us / 1e6
    if kind == "fused_mlp":
        return 6 * d[0] * d[1] * d[2] / us / 1e6
    if kind == "softmax":
        b = 2 * d[0] * d[1] * e
    elif kind == "layernorm":
        b = (2 * d[0] * d[1] + 2 * d[1]) * e
    elif kind == "rmsnorm":
        b = (2 * d[0] * d[1] + d[1]) * e
    elif kind == "cross_entropy":
        b = d[0] * d[1] * e + d[0] * 8 + 4
    elif kind == "rotary_embedding":
        b = 2 * d[0] * d[1] * d[2] * d[3] * e + d[2] * d[3] * e
    else:
        b = (d[0] * d[1] + d[0]) * e
    return b / us / 1e3  # GB/s


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kinds", default=",".join(catalogue.KINDS))
    ap.add_argument("--no-tune", action="store_true")
    ap.add_argument("--out", default="gpu_bench.json")
    args = ap.parse_args()
    catalogue.apply_precision_policy()
    results = {"device": torch.cuda.get_device_name(), "kinds": {}}
    x = torch.empty(2 ** 30, dtype=torch.float16, device="cuda")
    y = torch.empty_like(x)
    copy_us = bench(lambda: y.copy_(x))
    copy_gbs = 2 * x.numel() * 2 / copy_us / 1e3
    del x, y
    results["copy_gb_s"] = copy_gbs
    print(f"copy bandwidth {copy_gbs:.0f} GB/s", flush=True)
    for kind in args.kinds.split(","):
        mod = load(kind)
        default = dict(mod.CONFIG)
        kres = results["kinds"].setdefault(kind, [])
        for shape in GPU[kind]:
            t0 = time.time()
            fails = []
            for dtype, modes in [(torch.float16, catalogue.modes(kind)), (torch.bfloat16, ["normal"]),
                                 (torch.float32, ["normal", "large"])]:
                for mode in modes:
                    i = catalogue.make_inputs(kind, shape, dtype, "cuda", 1, mode)
                    ref = catalogue.reference(kind, i)
                    out = mod.kernel_fn(**i)
                    err = compare(kind, out, ref, i, dtype) if dtype != torch.bfloat16 else None
                    if dtype == torch.bfloat16:
                        o = out.float()
                        l2 = ((o - ref).norm() / ref.norm()).item()
                        if not math.isfinite(l2) or l2 > 2e-2:
                            err = f"bf16 rel L2 {l2}"
                    if err:
                        fails.append(f"{dtype} {mode}: {err}")
                    del i, ref, out
            i = catalogue.make_inputs(kind, shape, torch.float16, "cuda", 1, "normal")
            ref_us = bench(eager(kind, i))
            mod.CONFIG.clear(); mod.CONFIG.update(default)
            base_us = bench(lambda: mod.kernel_fn(**i))
            tried = {json.dumps(default, sort_keys=True): base_us}
            best, best_us = dict(default), base_us
            if not args.no_tune:
                for key, values in mod.TUNABLES.items():
                    for v in values:
                        cfg = dict(best); cfg[key] = v
                        k = json.dumps(cfg, sort_keys=True)
                        if k in tried:
                            continue
                        mod.CONFIG.clear(); mod.CONFIG.update(cfg)
                        try:
                            us = bench(lambda: mod.kernel_fn(**i))
                        except Exception as e:  # noqa: BLE001
                            fails.append(f"config {cfg}: {type(e).__name__}: {str(e)[:200]}")
                            continue
                        tried[k] = us
                        if us < best_us:
                            best, best_us = cfg, us
                mod.CONFIG.clear(); mod.CONFIG.update(best)
                for mode in ["normal", "large", "mixed"]:
                    ii = catalogue.make_inputs(kind, shape, torch.float16, "cuda", 2, mode)
                    err = compare(kind, mod.kernel_fn(**ii), catalogue.reference(kind, ii), ii, torch.float16)
                    if err:
                        fails.append(f"best config {mode}: {err}")
            if kind == "softmax" and shape[1] > mod.MAX_ROW_BLOCK:
                for pps in [0, 1, 2, 3, 4, 8]:
                    mod.CONFIG.clear(); mod.CONFIG.update(best); mod.CONFIG["LOOP_PROGRAMS_PER_SM"] = pps
                    us = bench(lambda: mod.kernel_fn(**i))
                    print(f"  softmax LOOP_PROGRAMS_PER_SM={pps}: {us:.1f} us", flush=True)
                    if us < best_us:
                        best, best_us = dict(mod.CONFIG), us
            unit = "TFLOP/s" if kind in COMPUTE else "GB/s"
            row = {"shape": shape, "eager_us": ref_us, "default_us": base_us, "best_us": best_us,
                   "best_config": best, "default_tp": throughput(kind, shape, base_us),
                   "best_tp": throughput(kind, shape, best_us), "eager_tp": throughput(kind, shape, ref_us),
                   "unit": unit, "failures": fails, "tried": tried, "seconds": time.time() - t0}
            if unit == "GB/s":
                row["best_pct_copy"] = 100 * row["best_tp"] / copy_gbs
                row["default_pct_copy"] = 100 * row["default_tp"] / copy_gbs
            kres.append(row)
            pct = f" ({row.get('default_pct_copy', 0):.0f}% / best {row.get('best_pct_copy', 0):.0f}% of copy)" if unit == "GB/s" else ""
            print(f"{kind} {shape}: eager {ref_us:.1f} us, default {base_us:.1f} us, best {best_us:.1f} us "
                  f"{row['best_tp']:.0f} {unit}{pct} speedup {ref_us / best_us:.2f}x best={best} "
                  f"[{row['seconds']:.0f}s] fails={fails}", flush=True)
            mod.CONFIG.clear(); mod.CONFIG.update(default)
            del i
            torch.cuda.empty_cache()
            Path(args.out).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
