#!/usr/bin/env bash
# Judges a kind's starter and candidate kernel files side by side on one warm worker: every
# correctness stage in float16 at each shape, then timing there. Prints one line per file and
# shape (verdict, µs, PyTorch eager µs, throughput); the JSON lines go to $OUT/compare.jsonl.
# Usage (on the GPU machine, from the repository root):
#   benches/gpu/compare.sh BIN KIND SHAPES [FILE...]   e.g.
#   benches/gpu/compare.sh gpu-bin/autokernel softmax "4096,50257 4096,32000" my_softmax.py
# SHAPES: one shape, or several separated by spaces inside one argument. With no FILE, the
# starter alone is judged and timed. Name a file twice to see the spread of its timing.
set -u
AK=$(realpath "$1"); KIND=$2; SHAPES=$3; shift 3
OUT=${OUT:-/tmp/ak-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-$(command -v python3)}
W=$(mktemp -d)
"$AK" new-kernel "$KIND" -o "$W/${KIND}_starter.py" --force >/dev/null
args=(); for s in $SHAPES; do args+=(--shape "$s"); done
"$AK" bench "$W/${KIND}_starter.py" "$@" "${args[@]}" --dtype float16 --json >"$W/out.json"
python3 - "$W/out.json" "$OUT/compare.jsonl" <<'PY'
import json, os, sys
text = open(sys.argv[1]).read().strip()
objs = [json.loads(text)] if text.startswith("{\n") else [json.loads(l) for l in text.splitlines() if l.strip()]
with open(sys.argv[2], "a") as log:
    for o in objs:
        log.write(json.dumps(o) + "\n")
        print(f"{os.path.basename(o.get('path', '?')):32s} {o.get('shape')!s:16s} {o['correctness']:6s} "
              f"{o.get('latency_us') or float('nan'):9.1f} us  eager {o.get('reference_latency_us') or float('nan'):9.1f} us  "
              f"{o.get('throughput') or 0:8.0f} {(o.get('reason') or '')[:100]}")
PY
