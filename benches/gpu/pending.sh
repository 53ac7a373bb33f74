#!/usr/bin/env bash
# The GPU comparisons of docs/benchmarks.md's "Timed on the GPU", in one device call (about
# a minute a group on the H200, 2026-11-30; give GROUP=a or GROUP=b to run half of it, e.g.
# one half per GPU of a two-GPU machine with CUDA_VISIBLE_DEVICES=0/1 and OUT set apart):
#   a: softmax starter (exp2) vs the starter before exp2 vs the aligned exp2 variant, at
#      4096x50257, 4096x50256, 4096x4096, 8192x8192;
#   b: cross_entropy the same at 4096x50257, 4096x32000; reduce starter vs the persistent
#      variant at 8192x8192, then the persistent variant tuned for 3 minutes.
# Each file passes every stage first (compare.sh = `autokernel bench`, one warm worker).
# Usage (on the GPU machine, from the repository root): benches/gpu/pending.sh BIN
# Writes $OUT/pending.txt (all the lines) and compare.sh's $OUT/compare.jsonl.
set -u
AK=$1; GROUP=${GROUP:-ab}
OUT=${OUT:-/tmp/ak-out}; mkdir -p "$OUT"; export OUT
HERE=$(cd "$(dirname "$0")" && pwd); V="$HERE/variants"
log() { echo "== $* ($(date -u +%H:%M:%S))" >>"$OUT/pending.txt"; }
if [[ $GROUP == *a* ]]; then
  log "softmax: starter, before exp2, aligned exp2"
  timeout 300 "$HERE/compare.sh" "$AK" softmax "4096,50257 4096,50256 4096,4096 8192,8192" \
    "$V/softmax_tl_exp.py" "$V/softmax_aligned_exp2.py" >>"$OUT/pending.txt" 2>&1
fi
if [[ $GROUP == *b* ]]; then
  log "cross_entropy: starter, before exp2, aligned exp2"
  timeout 200 "$HERE/compare.sh" "$AK" cross_entropy "4096,50257 4096,32000" \
    "$V/cross_entropy_tl_exp.py" "$V/cross_entropy_aligned_exp2.py" >>"$OUT/pending.txt" 2>&1
  log "reduce: starter, persistent"
  timeout 120 "$HERE/compare.sh" "$AK" reduce "8192,8192" "$V/reduce_persistent.py" \
    >>"$OUT/pending.txt" 2>&1
  log "reduce: the persistent variant tuned"
  W=$(mktemp -d)
  timeout 260 "$AK" tune "$V/reduce_persistent.py" --shape 8192,8192 --dtype float16 --budget 3m \
    --no-progress -w "$W/ws" -o "$W/best.py" >>"$OUT/pending.txt" 2>&1
fi
log "done"
