#!/usr/bin/env bash
# The issue-8 table in one run: the GPU's ceilings (ceilings.py: copy bandwidth, cuBLAS,
# SDPA, eager SwiGLU), then every starter judged and timed by `autokernel bench` in float16
# at the table's shapes, next to PyTorch eager and torch.compile of the same reference in the
# same worker (--compile). Each starter passes every stage at its shapes and the edge shapes
# or the row says which verdict it got.
# Usage (on the GPU machine, from the repository root): benches/gpu/roofline.sh BIN [KINDS]
# KINDS: a comma list (default: all nine). Writes $OUT/roofline.jsonl, $OUT/ceilings.json
# and prints the markdown table (also $OUT/roofline.md). With KERNELS_DIR set, the kernel of
# a kind is $KERNELS_DIR/KIND.py when that file exists, the starter otherwise.
# With TUNE=BUDGET (e.g. TUNE=40s), each starter is first tuned at the tuning shape of its
# row (`autokernel tune`, float16, BUDGET each, cut off after 5 minutes): the summaries go
# to $OUT/tune.txt, the tuned kernels to $OUT/tuned/KIND.py, and the table is of those.
# One device call may run 10 minutes: kinds × (BUDGET + ~20 s of worker start) plus ~20 s
# a kind for the table must fit, so tune a few kinds per call.
set -u
AK=$(realpath "$1"); KINDS=${2:-rmsnorm,softmax,layernorm,cross_entropy,rotary_embedding,reduce,matmul,flash_attention,fused_mlp}
OUT=${OUT:-/tmp/ak-out}; mkdir -p "$OUT"
HERE=$(cd "$(dirname "$0")" && pwd)
export PYTHONUNBUFFERED=1 AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-$(command -v python3)}
W=$(mktemp -d)
shapes() {
  case $1 in
    rmsnorm|layernorm) echo "--shape 4096,4096 --shape 8192,8192" ;;
    softmax) echo "--shape 4096,4096 --shape 8192,8192 --shape 4096,50257" ;;
    cross_entropy) echo "--shape 4096,50257 --shape 4096,32000" ;;
    rotary_embedding|flash_attention) echo "--shape 1,32,2048,128" ;;
    reduce) echo "--shape 8192,8192 --shape 4096,4096" ;;
    matmul) echo "--shape 4096,4096,4096 --shape 4096,11008,4096" ;;
    fused_mlp) echo "--shape 2048,4096,11008" ;;
  esac
}
# the shape of its row a kind is tuned at
tune_shape() {
  case $1 in
    rmsnorm|layernorm|reduce) echo 8192,8192 ;;
    softmax|cross_entropy) echo 4096,50257 ;;
    rotary_embedding|flash_attention) echo 1,32,2048,128 ;;
    matmul) echo 4096,4096,4096 ;;
    fused_mlp) echo 2048,4096,11008 ;;
  esac
}
IFS="," read -ra KIND_LIST <<<"$KINDS"
if [ -n "${TUNE:-}" ]; then
  KERNELS_DIR="$OUT/tuned"; mkdir -p "$KERNELS_DIR"
  for kind in "${KIND_LIST[@]}"; do
    "$AK" new-kernel "$kind" -o "$W/$kind-starter.py" --force >/dev/null
    t0=$(date +%s)
    # a hung worker must not eat the whole call
    timeout 300 "$AK" tune "$W/$kind-starter.py" --shape "$(tune_shape "$kind")" --dtype float16 \
      --budget "$TUNE" --no-progress -w "$W/ws-$kind" -o "$KERNELS_DIR/$kind.py" >>"$OUT/tune.txt" 2>>"$OUT/errs.txt"
    echo "tune $kind rc=$? wall_s=$(( $(date +%s) - t0 ))" >>"$OUT/tune.txt"
  done
fi
python3 "$HERE/ceilings.py" >"$OUT/ceilings.json" 2>>"$OUT/errs.txt"
for kind in "${KIND_LIST[@]}"; do
  if [ -n "${KERNELS_DIR:-}" ] && [ -f "$KERNELS_DIR/$kind.py" ]; then
    cp "$KERNELS_DIR/$kind.py" "$W/$kind.py"
  else
    "$AK" new-kernel "$kind" -o "$W/$kind.py" --force >/dev/null
  fi
  t0=$(date +%s%N)
  # shellcheck disable=SC2046
  timeout 240 "$AK" bench "$W/$kind.py" $(shapes "$kind") --dtype float16 --compile --json \
    >"$W/$kind.jsonl" 2>>"$OUT/errs.txt"
  echo "$kind rc=$? wall_ms=$(( ($(date +%s%N) - t0) / 1000000 ))" >>"$OUT/summary.txt"
  # one pretty object when a single shape was asked for; one line each otherwise
  python3 -c "import json,sys
text=open('$W/$kind.jsonl').read().strip()
objs=[json.loads(text)] if text.startswith('{\n') else [json.loads(l) for l in text.splitlines() if l]
for o in objs: print(json.dumps(o))" >>"$OUT/roofline.jsonl" 2>>"$OUT/errs.txt"
done
python3 "$HERE/roofline_table.py" "$OUT/roofline.jsonl" "$OUT/ceilings.json" | tee "$OUT/roofline.md"
