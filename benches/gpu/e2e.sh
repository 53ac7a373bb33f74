#!/usr/bin/env bash
# End to end on the GPU for one model: `autokernel run` (profile, tune, verify in every
# deploy mode), `autokernel export`, then benches/gpu/deploy_modes.py timing the model in
# every mode without and with the exported package, in one process. Logs and JSON go to
# $OUT/<name>-*; the deploy table is appended to $OUT/deploy.jsonl.
#
#   benches/gpu/e2e.sh NAME BUDGET "RUN FLAGS" "DEPLOY_MODES FLAGS"
#   benches/gpu/e2e.sh gpt2-hf 120s \
#     "--model transformers:GPT2LMHeadModel --input-shape 1,1024 --dtype float16" \
#     "--hf GPT2LMHeadModel --input-shape 1,1024"
#
# AK (default gpu-bin/autokernel) and AUTOKERNEL_PYTHON (default python3) as docs/gpu.md says.
# The workspace and the package come back as $OUT/<name>-ws.tgz (the device tool returns a
# limited number of files).
set -u
name=$1 budget=$2 run_flags=$3 deploy_flags=$4
AK=${AK:-gpu-bin/autokernel}
export AUTOKERNEL_PYTHON=${AUTOKERNEL_PYTHON:-python3}
out=${OUT:?set OUT to a folder for the logs}
ws=$out/$name-ws
start=$(date +%s)
# shellcheck disable=SC2086 # the flags are meant to split into words
"$AK" run $run_flags --budget "$budget" --workspace "$ws" --json >"$out/$name-run.json" 2>"$out/$name-run.log"
echo "$name: run exit $? after $(($(date +%s) - start)) s"
"$AK" export -w "$ws" -o "$out/$name-pkg" --force >"$out/$name-export.log" 2>&1
echo "$name: export exit $?"
if [ -d "$out/$name-pkg" ]; then
    # shellcheck disable=SC2086
    python3 benches/gpu/deploy_modes.py $deploy_flags --package "$out/$name-pkg" --out "$out/deploy.jsonl" \
        >"$out/$name-deploy.json" 2>"$out/$name-deploy.log"
    echo "$name: deploy_modes exit $?"
fi
echo "$name: done after $(($(date +%s) - start)) s"
# one archive: the device tool brings back a limited number of files (deploy.log stays
# out too, to be read first)
kept=()
for f in "$name-ws" "$name-pkg" "$name-run.json" "$name-run.log" "$name-export.log" "$name-deploy.log"; do
    [ -e "$out/$f" ] && kept+=("$f")
done
tar czf "$out/$name-ws.tgz" -C "$out" "${kept[@]}" && for f in "${kept[@]}"; do
    [ "$f" = "$name-deploy.log" ] || rm -rf "${out:?}/$f"
done
