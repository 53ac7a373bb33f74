"""The Python baseline for `benches/import.rs`: load a Chrome trace with the json module and
aggregate kernel time per op the simple way (kernel → launch by correlation → op by
External id). Prints seconds, MB/s and peak memory.

    python benches/import_python.py PATH_TO_TRACE
"""

import json
import os
import resource
import sys
import time
from collections import defaultdict


def main(path):
    size = os.path.getsize(path)
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    ops, launches, kernels = {}, {}, []
    for e in events:
        if e.get("ph") != "X":
            continue
        cat, args = e.get("cat"), e.get("args", {})
        if cat == "cpu_op" and "External id" in args:
            ops.setdefault(args["External id"], e["name"])
        elif cat in ("cuda_runtime", "cuda_driver") and "correlation" in args:
            launches[args["correlation"]] = args.get("External id")
        elif cat == "kernel":
            kernels.append((args.get("correlation"), e["dur"], e["name"]))
    per_op = defaultdict(float)
    for corr, dur, name in kernels:
        per_op[ops.get(launches.get(corr), name)] += dur
    elapsed = time.perf_counter() - t0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"python json: {elapsed:.2f} s, {size / 1e6 / elapsed:.0f} MB/s, peak RSS {peak_mb:.0f} MB, "
          f"{len(kernels)} kernels, {len(per_op)} ops")


if __name__ == "__main__":
    main(sys.argv[1])
