#!/usr/bin/env bash
# Issue 37's figures for the fused add-norm chains in one device call (docs/benchmarks.md,
# "Fused add-norms"): the kinds against the unfused ops and torch.compile
# (benches/gpu/fused_norms.py), then `autokernel run` + export + the deploy table
# (benches/gpu/e2e.sh, launches per forward included) on the models named in MODELS, each
# started only while LIMIT (the call's limit, seconds; default 600) leaves it 300 s. From the
# repository root, gpu-bin/autokernel built as docs/gpu.md says:
#
#   LIMIT=600 BUDGET=120s MODELS="llama gpt2" benches/gpu/chains_e2e.sh
set -u
LIMIT=${LIMIT:-600}
BUDGET=${BUDGET:-120s}
out=${OUT:?set OUT to a folder for the logs}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
python3 -c "import torch,triton,transformers;print(torch.__version__,triton.__version__,transformers.__version__)"
date -u
if [ -z "${SKIP_KINDS:-}" ]; then
    python3 benches/gpu/fused_norms.py --json "$out/fused_norms.json" 2>&1 | tee "$out/fused_norms.md"
fi
L='{"hidden_size":768,"intermediate_size":2048,"num_hidden_layers":12,"num_attention_heads":12,"num_key_value_heads":12,"vocab_size":32000}'
for model in ${MODELS:-llama gpt2}; do
    [ $((SECONDS + 300)) -lt "$LIMIT" ] || { echo "$model: skipped, too little of the call left"; continue; }
    date -u
    case $model in
    llama) bash benches/gpu/e2e.sh llama-hf "$BUDGET" \
        "--model transformers:LlamaForCausalLM --model-kwargs $L --input-shape 1,512 --dtype float16 --plateau 2 --top 7" \
        "--hf LlamaForCausalLM --config $L --input-shape 1,512 --watchdog-s ${WATCHDOG_S:-300}" ;;
    gpt2) bash benches/gpu/e2e.sh gpt2-hf "$BUDGET" \
        "--model transformers:GPT2LMHeadModel --input-shape 1,1024 --dtype float16 --plateau 2 --top 7" \
        "--hf GPT2LMHeadModel --input-shape 1,1024 --watchdog-s ${WATCHDOG_S:-300}" ;;
    bert) bash benches/gpu/e2e.sh bert-hf "$BUDGET" \
        "--model transformers:BertModel --input-shape 8,512 --dtype float16 --plateau 2 --top 7" \
        "--hf BertModel --input-shape 8,512 --watchdog-s ${WATCHDOG_S:-300}" ;;
    *) echo "unknown model $model (llama, gpt2, bert)" ;;
    esac
done
date -u
