#!/usr/bin/env bash
# The noise of the loop's measurements on one model, without and with the GPU lease
# (docs/bench.md, "The GPU lease"): the same `autokernel run` twice, AUTOKERNEL_GPU_LEASE=off
# first, then the default, each with its log and its experiments (`autokernel log --json`,
# with every head-to-head repetition and the GPU's conditions), then the table of
# benches/gpu/noise_table.py for both. Everything goes to $OUT/<name>-*.
#
#   benches/gpu/noise.sh NAME BUDGET "RUN FLAGS"
#   benches/gpu/noise.sh opt 120s \
#     "--model transformers:OPTForCausalLM --input-shape 1,1024 --dtype float16 --top 4 --plateau 2"
#
# LEASES="on" runs only the default (default: "off on").
# AK (default gpu-bin/autokernel) and AUTOKERNEL_PYTHON (default python3) as docs/gpu.md says.
set -u
name=$1 budget=$2 run_flags=$3
AK=${AK:-gpu-bin/autokernel}
export AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-python3}
out=${OUT:?set OUT to a folder for the logs}
args=()
for lease in ${LEASES:-off on}; do
    ws=$out/$name-lease-$lease-ws
    start=$(date +%s)
    # shellcheck disable=SC2086 # the flags are meant to split into words
    AUTOKERNEL_GPU_LEASE=$lease "$AK" run $run_flags --budget "$budget" --workspace "$ws" \
        --no-progress >"$out/$name-lease-$lease-run.log" 2>&1
    echo "$name, lease $lease: run exit $? after $(($(date +%s) - start)) s"
    "$AK" log -w "$ws" --json >"$out/$name-lease-$lease-log.json"
    cp "$ws/verify.json" "$out/$name-lease-$lease-verify.json" 2>/dev/null
    args+=("$name, lease $lease" "$out/$name-lease-$lease-log.json")
    rm -rf "$ws"
done
python3 "$(dirname "$0")/noise_table.py" "${args[@]}" | tee "$out/$name-noise.md"
