"""Turns roofline.sh's output into the docs/benchmarks.md table.

Memory-bound kinds: % of the copy bandwidth measured in the same run (ceilings.json), and
% of a copy that moves as many bytes as the row's problem (same run; fixed costs such as
launch, ramp-up and the last wave's tail weigh on a small copy as on a small kernel).
matmul: % of cuBLAS (PyTorch eager's `A @ B` timed in the same worker). flash_attention:
% of eager `scaled_dot_product_attention`; fused_mlp: % of the eager SwiGLU.
Usage: python3 roofline_table.py roofline.jsonl ceilings.json
"""
import json
import math
import sys

GOAL = {  # issue 8's goal per kind and shape, in % of the ceiling named above
    ("rmsnorm", "4096x4096"): 85, ("rmsnorm", "8192x8192"): 85,
    ("softmax", "4096x4096"): 85, ("softmax", "8192x8192"): 85, ("softmax", "4096x50257"): 80,
    ("layernorm", "4096x4096"): 80, ("cross_entropy", "4096x50257"): 75,
    ("cross_entropy", "4096x32000"): 75, ("rotary_embedding", "1x32x2048x128"): 80,
    ("reduce", "8192x8192"): 80, ("matmul", "4096x4096x4096"): 85,
    ("matmul", "4096x11008x4096"): 85, ("flash_attention", "1x32x2048x128"): 80,
    ("fused_mlp", "2048x4096x11008"): 95,
}
COMPUTE = {"matmul": "cuBLAS", "flash_attention": "SDPA", "fused_mlp": "eager"}


def same_size_copy_gb_s(ceilings, mb_moved):
    """The copy bandwidth measured at the size nearest mb_moved (within 10%), or None."""
    sizes = {float(k): v for k, v in (ceilings.get("copy_gb_s_by_mb_moved") or {}).items()}
    if not sizes:
        return None
    nearest = min(sizes, key=lambda k: abs(math.log(k / mb_moved)))
    return sizes[nearest] if abs(nearest / mb_moved - 1) <= 0.10 else None


def main():
    rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
    ceilings = json.load(open(sys.argv[2]))
    copy = ceilings.get("copy_gb_s")
    print(f"copy bandwidth {copy:.0f} GB/s; device {ceilings.get('device')}\n")
    print("| kind | shape | verdict | starter µs | eager µs | torch.compile µs | % of ceiling | "
          "% of same-size copy | vs eager | vs torch.compile | goal | turnaround s |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        kind, shape = r["kind"], (r.get("shape") or "?").replace(",", "x")
        lat, ref, comp = r.get("latency_us"), r.get("reference_latency_us"), r.get("compiled_latency_us")
        if lat is None:
            reason = (r.get("reason") or "")[:80]
            print(f"| {kind} | {shape} | {r['correctness']} ({r.get('failed_stage')}: {reason}) | | | | | | | | | |")
            continue
        same = "—"
        if kind in COMPUTE:
            pct, ceiling = 100.0 * ref / lat, COMPUTE[kind]
        else:
            pct, ceiling = 100.0 * r["throughput"] / copy, "copy"
            small = same_size_copy_gb_s(ceilings, r["throughput"] * lat / 1e3)  # GB/s · µs = kB
            if small:
                same = f"{100.0 * r['throughput'] / small:.0f}%"
        goal = GOAL.get((kind, shape))
        mark = "" if goal is None else (f"≥ {goal}% " + ("✓" if pct >= goal else "✗"))
        comp_s = f"{comp:.1f}" if comp else "—"
        vs_comp = f"{comp / lat:.2f}×" if comp else "—"
        print(f"| {kind} | {shape} | {r['correctness']} | {lat:.1f} | {ref:.1f} | {comp_s} | "
              f"{pct:.0f}% of {ceiling} | {same} | {ref / lat:.2f}× | {vs_comp} | {mark} | {r['turnaround_s']:.1f} |")


if __name__ == "__main__":
    main()
