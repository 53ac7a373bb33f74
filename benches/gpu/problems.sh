#!/usr/bin/env bash
# Issue 38's GPU figures (docs/benchmarks.md, "Problems in KernelBench's format"): the
# judge's timing of a few problems (`autokernel bench --problem … --compile --json`) beside
# benches/gpu/problem_timing.py, an independent script that times the way KernelBench does,
# both on the same copies of examples/problems scaled up by SCALE (default 16). From the
# repository root, gpu-bin/autokernel built as docs/gpu.md says:
#
#   OUT=/tmp/out benches/gpu/problems.sh
set -u
out=${OUT:?set OUT to a folder for the logs}
AK=${AK:-gpu-bin/autokernel}
export AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-python3}
stems=${STEMS:-01_relu 06_softmax 08_residual_rmsnorm 10_linear_gelu}
# shellcheck disable=SC2086 # the stems are meant to split into words
python3 benches/gpu/problem_timing.py --scale "${SCALE:-16}" --out "$out/problems" $stems \
    >"$out/problem_timing.jsonl"
for stem in $stems; do
    "$AK" bench --problem "$out/problems/$stem.py" "tests/problems/$stem/correct.py" --compile --json \
        >"$out/judge-$stem.json" 2>"$out/judge-$stem.log"
    echo "$stem: bench exit $?"
done
# the independent script again, after the judge: the spread between its two runs is the noise
# shellcheck disable=SC2086
python3 benches/gpu/problem_timing.py --scale "${SCALE:-16}" --out "$out/problems" $stems \
    >"$out/problem_timing_after.jsonl"
