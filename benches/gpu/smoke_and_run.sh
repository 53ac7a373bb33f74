#!/usr/bin/env bash
# One H200 session: the starters of rmsnorm, softmax and matmul judged by `autokernel bench`
# (each a fresh process: worker start, torch import, CUDA init, every stage, timing), then
# the main job on GPT-2 small with a short budget. Logs go to $OUT.
# Usage (on the GPU machine, from the repository root): benches/gpu/smoke_and_run.sh BIN BUDGET
set -u
AK=$(realpath "$1"); BUDGET=${2:-150s}
OUT=${OUT:-/tmp/ak-out}; mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-$(command -v python3)}
S="$OUT/summary.txt"
{ date -u; nvidia-smi --query-gpu=name,clocks.sm,clocks.mem --format=csv,noheader; "$AK" --version; } >"$S" 2>&1
for k in rmsnorm softmax matmul; do
  "$AK" new-kernel "$k" -o "/tmp/$k.py" --force
  t0=$(date +%s%N)
  timeout 60 "$AK" bench "/tmp/$k.py" --device cuda --json >>"$OUT/bench.jsonl" 2>>"$OUT/errs.txt"
  echo "bench $k rc=$? wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" >>"$S"
done
t0=$(date +%s%N)
timeout 210 "$AK" run --example gpt2 --agent tune --device cuda --budget "$BUDGET" --top 3 \
  --workspace /tmp/ws >"$OUT/run.out" 2>"$OUT/run.err"
echo "run rc=$? wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" >>"$S"
cp /tmp/ws/results.tsv /tmp/ws/report.md /tmp/ws/verify.json "$OUT/" 2>>"$OUT/errs.txt"
cat "$S"
