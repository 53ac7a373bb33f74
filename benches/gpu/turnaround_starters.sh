#!/usr/bin/env bash
# Issue 36, point 4: the judge's turnaround per candidate for the nine starters, as the loop
# sees it. One `autokernel bench` process judges ROUNDS copies of every starter (each copy
# with a different comment inside its @triton.jit functions, so Triton compiles it afresh,
# as it must a new candidate), each on a sandboxed worker of its own taken from the spare
# pool, in float16 at the catalogue's shapes. Prints the median and worst `turnaround_s`
# per kind and overall (the process's first file, which waits for the first worker's start,
# apart) and the stage times of one judged file per kind.
#
#   benches/gpu/turnaround_starters.sh gpu-bin/autokernel [ROUNDS]   # default 2
#
# Writes $OUT/turnaround_starters.jsonl (one bench --json line per file).
set -u
AK=$(realpath "$1"); ROUNDS=${2:-2}; DEV=${DEVICE:-cuda}
OUT=${OUT:-/tmp/ak-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-$(command -v python3)}
S=$(dirname "$0")/../../autokernel-bench/python/starters
W=$(mktemp -d)
files=()
for r in $(seq 1 "$ROUNDS"); do
  for f in "$S"/*.py; do
    k=$(basename "$f" .py)
    python3 - "$f" "$W/${k}_$r.py" "round $r pid $$" <<'PY'
import sys
lines = open(sys.argv[1]).read().split("\n")
out = [l + "  # " + sys.argv[3] if "tl.program_id(" in l else l for l in lines]
open(sys.argv[2], "w").write("\n".join(out))
PY
    files+=("$W/${k}_$r.py")
  done
done
t0=$(date +%s%N)
timeout 900 "$AK" bench "${files[@]}" --device "$DEV" --dtype float16 --json \
  >"$OUT/turnaround_starters.jsonl" 2>"$OUT/turnaround_starters.err"
echo "bench exit $? after $(( ($(date +%s%N) - t0) / 1000000 )) ms for ${#files[@]} files"
python3 - "$OUT/turnaround_starters.jsonl" <<'PY' | tee "$OUT/turnaround_starters.md"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
judged = rows[1:]  # the first file waits for the first worker's start
print("| kind | turnaround_s (each copy) | median | worst | verdicts |")
print("| --- | --- | --- | --- | --- |")
for kind in sorted({r["kind"] for r in rows}):
    t = [r["turnaround_s"] for r in judged if r["kind"] == kind]
    v = sorted({r["correctness"] for r in rows if r["kind"] == kind})
    if t:
        print(f"| {kind} | {', '.join(f'{x:.2f}' for x in t)} | {statistics.median(t):.2f} | {max(t):.2f} | {', '.join(v)} |")
t = [r["turnaround_s"] for r in judged]
print(f"| all but the first file | {len(t)} files | {statistics.median(t):.2f} | {max(t):.2f} | first file {rows[0]['turnaround_s']:.2f} s |")
print()
seen = set()
for r in judged:
    if r["kind"] in seen:
        continue
    seen.add(r["kind"])
    print(f"{r['kind']}: " + " ".join(f"{s['stage']} {s['duration_s']:.2f}" for s in r.get("stages", [])))
PY
