#!/usr/bin/env bash
# Same machine right after kernels_call2.sh (FlashAttention-4 still in /tmp/fa4site): 60 training steps of 786,432
# tokens per recipe, seed 1337, one GPU: 04-27 with torch's varlen kernel and with FA4's (same data, same seed:
# train losses every 10 steps), 03-23 on the bundled sp1024 sample, 04-09 on the CaseOps shards (step time only).
set -u
export PYTHONPATH=/tmp/site:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
c=DATA_PATH=.carry/wiki_caseops_small,TOKENIZER_PATH=.carry/caseops8192.model
WARMUP_STEPS=3 timeout -k 5 ${LIMIT:-545} python3 bench/step_time.py train --steps 60 --batch-tokens 786432 \
  --window 10:20 --window 30:60 --loss-at 10 20 30 40 50 60 --budget ${BUDGET:-530} \
  --config 0427_torch_varlen:RECIPE=2026-04-27,$c,DOC_ATTN_BACKEND=torch_varlen \
  --config 0427_fa4_varlen:RECIPE=2026-04-27,$c,DOC_ATTN_BACKEND=fa4_varlen \
  --config 0323 --config 0409:RECIPE=2026-04-09,$c 2>&1 | python3 -u .carry/stamp.py | tee $OUT/train.txt | tail -40
