#!/usr/bin/env bash
# The runs of issue 36's "done when" in one device call (docs/benchmarks.md, "The GPU lease
# and the interleaved bench"): OPT-125m-shaped and Llama-style, `run --budget 150s`, with
# the lease, then OPT again without it (the noise the lease removes), each table printed by
# noise.sh and its logs under $OUT. Each 150 s run starts only when LIMIT (the call's limit,
# seconds; default 600) leaves it 200 s. From the repository root, gpu-bin/autokernel built
# as docs/gpu.md says:
#
#   LIMIT=600 benches/gpu/noise_runs.sh
set -u
LIMIT=${LIMIT:-600}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu --format=csv
python3 -c "import torch,triton,transformers;print(torch.__version__,triton.__version__,transformers.__version__)"
nproc
L='{"hidden_size":768,"intermediate_size":2048,"num_hidden_layers":12,"num_attention_heads":12,"num_key_value_heads":12,"vocab_size":32000}'
OPT="--model transformers:OPTForCausalLM --input-shape 1,1024 --dtype float16 --top 7 --plateau 2"
LLAMA="--model transformers:LlamaForCausalLM --model-kwargs $L --input-shape 1,512 --dtype float16 --top 7 --plateau 2"
date -u
LEASES=on benches/gpu/noise.sh opt 150s "$OPT"
date -u
[ $((SECONDS + 200)) -lt "$LIMIT" ] && LEASES=on benches/gpu/noise.sh llama 150s "$LLAMA"
date -u
[ $((SECONDS + 200)) -lt "$LIMIT" ] && LEASES=off benches/gpu/noise.sh opt 150s "$OPT"
date -u
