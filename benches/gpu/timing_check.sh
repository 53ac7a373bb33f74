#!/usr/bin/env bash
# A short H200 check of `autokernel bench` timing: rmsnorm and softmax starters judged and
# timed in fp16 at single gpu shapes, each a fresh process. Usage: timing_check.sh BIN
set -u
AK=$(realpath "$1"); OUT=${OUT:-/tmp/ak-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-$(command -v python3)}
cd /tmp && "$AK" new-kernel rmsnorm -o r.py --force && "$AK" new-kernel softmax -o s.py --force
for case in "r.py 4096,4096" "r.py 8192,8192" "s.py 4096,4096"; do
  set -- $case; t0=$(date +%s%N)
  timeout 45 "$AK" bench "$1" --device cuda --shape "$2" --dtype float16 --json >>"$OUT/bench.jsonl" 2>>"$OUT/errs.txt"
  echo "$1 $2 rc=$? wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" | tee -a "$OUT/summary.txt"
done
