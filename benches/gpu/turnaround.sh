#!/usr/bin/env bash
# Experiment turnaround on the GPU, a warm worker against a fresh process per experiment
# (issue 4 and 8). For each of rmsnorm, softmax and matmul, N distinct candidates (the
# starter with a different comment inside its @triton.jit function, so Triton compiles each
# afresh, as it would a new candidate) are judged like a model target: every stage in
# float16 with the shape added, then timed at it.
#   fresh: one `autokernel bench` process per candidate (worker start, torch import, CUDA
#          init, every stage, timing), wall time measured outside
#   warm:  one `autokernel bench` process for all N candidates; `turnaround_s` of the 2nd
#          and later files is the warm worker's time per experiment
# Usage (on the GPU machine, from the repository root): benches/gpu/turnaround.sh BIN [N]
# Writes $OUT/turnaround.jsonl (one line per evaluation) and prints a summary.
set -u
AK=$(realpath "$1"); N=${2:-4}; DEV=${DEVICE:-cuda}
# SPECS overrides the kinds and shapes, e.g. for a CPU dry run: SPECS="rmsnorm 64,64;softmax 8,64"
SPECS=${SPECS:-"rmsnorm 4096,4096;softmax 4096,4096;matmul 4096,4096,4096"}
OUT=${OUT:-/tmp/ak-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-$(command -v python3)}
W=$(mktemp -d)
variants() { # kind tag: writes $W/<kind>_<tag><i>.py for i in 1..N
  "$AK" new-kernel "$1" -o "$W/$1.py" --force >/dev/null
  for i in $(seq 1 "$N"); do
    python3 - "$W/$1.py" "$W/$1_$2$i.py" "$2$i-$$" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
# a comment on the first program_id line of every jit function: a new source for Triton
src = re.sub(r"(tl\.program_id\(0\))", r"\1  # variant " + sys.argv[3], src)
open(sys.argv[2], "w").write(src)
PY
  done
}
IFS=";" read -ra SPEC_LIST <<<"$SPECS"
for spec in "${SPEC_LIST[@]}"; do
  set -- $spec; kind=$1; shape=$2
  variants "$kind" fresh; variants "$kind" warm
  for i in $(seq 1 "$N"); do
    t0=$(date +%s%N)
    timeout 120 "$AK" bench "$W/${kind}_fresh$i.py" --device "$DEV" --shape "$shape" --dtype float16 \
      --json >"$W/line.json" 2>>"$OUT/errs.txt"
    wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
    python3 -c "import json; v=json.load(open('$W/line.json')); v['mode']='fresh'; v['wall_s']=$wall_ms/1000; print(json.dumps(v))" \
      >>"$OUT/turnaround.jsonl" 2>>"$OUT/errs.txt"
  done
  files=$(for i in $(seq 1 "$N"); do echo "$W/${kind}_warm$i.py"; done)
  t0=$(date +%s%N)
  # shellcheck disable=SC2086
  timeout 300 "$AK" bench $files --device "$DEV" --shape "$shape" --dtype float16 --json 2>>"$OUT/errs.txt" \
    | python3 -c "import json,sys
for l in sys.stdin:
    v=json.loads(l); v['mode']='warm'; print(json.dumps(v))" >>"$OUT/turnaround.jsonl"
  echo "warm_total $kind wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" >>"$OUT/summary.txt"
done
python3 - "$OUT/turnaround.jsonl" <<'PY' | tee -a "$OUT/summary.txt"
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for kind in ("rmsnorm", "softmax", "matmul"):
    fresh = [r["wall_s"] for r in rows if r["kind"] == kind and r["mode"] == "fresh"]
    warm_all = [r["turnaround_s"] for r in rows if r["kind"] == kind and r["mode"] == "warm"]
    warm = warm_all[1:]  # the first file pays the worker's start
    verdicts = {r["correctness"] for r in rows if r["kind"] == kind}
    if fresh and warm:
        f, w = statistics.median(fresh), statistics.median(warm)
        print(f"{kind}: fresh median {f:.2f} s {fresh}; warm median {w:.2f} s {warm} "
              f"(first {warm_all[0]:.2f} s); {f / w:.1f}x experiments per hour; verdicts {verdicts}")
    stages = [r for r in rows if r["kind"] == kind and r["mode"] == "warm"][1:2]
    for r in stages:
        print("  warm stage times:", " ".join(f"{s['stage']} {s['duration_s']:.2f}" for s in r["stages"]))
PY
