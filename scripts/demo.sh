#!/usr/bin/env bash
# `make demo`: the main job on a bundled example. GPU present: gpt2; otherwise the tiny
# model on the CPU with Triton's interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
AK=./target/release/autokernel
if "$AUTOKERNEL_PYTHON" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  example=gpt2; device=cuda; extra=(--budget 20m)
else
  example=tiny; device=cpu; extra=(--max-experiments 6)
fi
echo "autokernel demo: --example $example on $device" >&2
"$AK" run --example "$example" --agent tune --device "$device" --workspace autokernel-workspace "${extra[@]}"
echo "report: autokernel-workspace/report.md" >&2
