"""The noise of a run's measurements, from its workspace's `autokernel log --json`.

    python3 benches/gpu/noise_table.py NAME LOG.json [NAME LOG.json ...]

Prints, per run: the head-to-heads and how many were too noisy to decide (spread over
`keep::MAX_SPREAD`, 25%), retried, the median spread of those whose incumbent takes 10 us
or more, the largest lease wait and process count the GPU showed, and per target the
baseline bench's latency beside the first head-to-head's reading of the same kernel (the
incumbent then is the baseline), the spread of each bench's interleaved repetitions with
PyTorch, and how many candidates' bench latencies lie within 5% of their head-to-head
reading: the issue's "bench and head to head within 5%".
"""

import json
import statistics
import sys

MAX_SPREAD = 0.25


def table(name, rows):
    h2h = [r for r in rows if r.get("head_to_head")]
    noisy = [r for r in h2h if r["head_to_head"]["spread"] > MAX_SPREAD]
    retried = [r for r in h2h if r["head_to_head"].get("retries", 0) > 0]
    big = [r["head_to_head"]["spread"] for r in h2h if r["head_to_head"]["incumbent_latency_us"] >= 10.0]
    conditions = [r["head_to_head"].get("conditions") or {} for r in h2h]
    waits = [c.get("lease_wait_ms", 0.0) for c in conditions]
    procs = [c.get("gpu_processes") for c in conditions if c.get("gpu_processes") is not None]
    clocks = [c.get("sm_clock_mhz") for c in conditions if c.get("sm_clock_mhz")]
    print(f"## {name}")
    print(f"head-to-heads: {len(h2h)}, too noisy to decide: {len(noisy)}, retried: {len(retried)}")
    if big:
        print(f"spread of kernels >= 10 us: median {100 * statistics.median(big):.1f}%, max {100 * max(big):.1f}% ({len(big)})")
    if h2h:
        print(f"lease wait per head-to-head: max {max(waits):.1f} ms; GPU processes seen: max {max(procs, default='n/a')}; "
              f"SM clock range: {min((c[0] for c in clocks), default='n/a')}-{max((c[1] for c in clocks), default='n/a')} MHz")
    # the bench's own interleaved repetitions (kernel and PyTorch paired): their spread, and
    # every benched candidate's bench latency against its head-to-head reading
    bench_spreads = [spread(r) for r in rows if spread(r) is not None and (r.get("latency_us") or 0) >= 10.0]
    if bench_spreads:
        print(f"bench spread of kernels >= 10 us (paired ratios with PyTorch): median {100 * statistics.median(bench_spreads):.1f}%, "
              f"max {100 * max(bench_spreads):.1f}% ({len(bench_spreads)})")
    pairs = [(r["latency_us"], r["candidate_us"]) for r in h2h if r.get("latency_us") and r.get("candidate_us")]
    if pairs:
        within = sum(abs(b / h - 1) <= 0.05 for b, h in pairs)
        print(f"candidates' bench latency within 5% of their head-to-head reading: {within} of {len(pairs)}")
    print("| target | baseline bench us | first head-to-head, same kernel, us | ratio | spreads (%) |")
    print("| --- | --- | --- | --- | --- |")
    targets = []
    for r in rows:
        if r["target"] not in targets:
            targets.append(r["target"])
    for t in targets:
        mine = [r for r in rows if r["target"] == t]
        base = next((r for r in mine if r["decision"] == "baseline" and r.get("latency_us")), None)
        first = next((r for r in mine if r.get("head_to_head")), None)
        spreads = " ".join(f"{100 * r['head_to_head']['spread']:.0f}" for r in mine if r.get("head_to_head"))
        if base is None:
            continue
        b = base["latency_us"]
        if first is None:
            print(f"| {t} | {b:.2f} | - | - | - |")
            continue
        h = first["head_to_head"]["incumbent_latency_us"]
        print(f"| {t} | {b:.2f} | {h:.2f} | {b / h:.3f} | {spreads} |")
    print()


def spread(row):
    """(max - min) / median of a row's bench repetitions' PyTorch-over-kernel ratios."""
    ours, torch = row.get("bench_samples_us") or [], row.get("bench_reference_samples_us") or []
    if len(ours) < 2 or len(ours) != len(torch):
        return None
    ratios = [t / o for t, o in zip(torch, ours)]
    return (max(ratios) - min(ratios)) / statistics.median(ratios)


def main(argv):
    for name, path in zip(argv[::2], argv[1::2]):
        with open(path) as f:
            table(name, json.load(f))


if __name__ == "__main__":
    main(sys.argv[1:])
