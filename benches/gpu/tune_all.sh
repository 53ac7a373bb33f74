#!/usr/bin/env bash
# Each starter tuned at the first shape of its issue-8 row (`autokernel tune`, BUDGET each,
# float16), then the issue-8 table of the tuned kernels (roofline.sh with KERNELS_DIR).
# Usage (on the GPU machine, from the repository root): benches/gpu/tune_all.sh BIN BUDGET [KINDS]
# e.g. benches/gpu/tune_all.sh gpu-bin/autokernel 40s softmax,cross_entropy
# Writes $OUT/tune.txt (each tune's summary), the tuned kernels as $OUT/tuned/KIND.py and
# roofline.sh's files. One device call may run 10 minutes: the kinds × (BUDGET + ~20 s of
# worker start) plus roofline.sh (~20 s a kind) must fit, so tune a few kinds per call (run
# on the H200 on 2026-11-30, 6 kinds in 3 calls: docs/benchmarks.md).
set -u
AK=$(realpath "$1"); BUDGET=${2:-60s}
KINDS=${3:-rmsnorm,softmax,layernorm,cross_entropy,rotary_embedding,reduce,matmul,flash_attention,fused_mlp}
OUT=${OUT:-/tmp/ak-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1 AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-$(command -v python3)}
W=$(mktemp -d); TUNED="$OUT/tuned"; mkdir -p "$TUNED"
first_shape() {
  case $1 in
    rmsnorm|layernorm|reduce) echo 8192,8192 ;;
    softmax) echo 4096,50257 ;;
    cross_entropy) echo 4096,50257 ;;
    rotary_embedding|flash_attention) echo 1,32,2048,128 ;;
    matmul) echo 4096,4096,4096 ;;
    fused_mlp) echo 2048,4096,11008 ;;
  esac
}
IFS="," read -ra KIND_LIST <<<"$KINDS"
for kind in "${KIND_LIST[@]}"; do
  "$AK" new-kernel "$kind" -o "$W/$kind-starter.py" --force >/dev/null
  t0=$(date +%s)
  # a hung worker must not eat the whole call: each tune is cut off after 5 minutes
  timeout 300 "$AK" tune "$W/$kind-starter.py" --shape "$(first_shape "$kind")" --dtype float16 --budget "$BUDGET" \
    --no-progress -w "$W/ws-$kind" -o "$TUNED/$kind.py" >>"$OUT/tune.txt" 2>>"$OUT/errs.txt"
  echo "tune $kind rc=$? wall_s=$(( $(date +%s) - t0 ))" >>"$OUT/tune.txt"
done
KERNELS_DIR="$TUNED" "$HERE/roofline.sh" "$AK" "$KINDS"
