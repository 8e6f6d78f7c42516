#!/usr/bin/env bash
# Same machine right after train_call3.sh: the control for its loss comparison (04-27 with torch's varlen kernel, the
# same seed twice: how far the same code's losses drift run to run) and 03-23 on the bundled sp1024 sample.
set -u
export PYTHONPATH=/tmp/site:/tmp/fa4site:/tmp/fa4site/nvidia_cutlass_dsl/dsl_packages PYTHONUNBUFFERED=1
c=DATA_PATH=.carry/wiki_caseops_small,TOKENIZER_PATH=.carry/caseops8192.model
WARMUP_STEPS=3 timeout -k 5 ${LIMIT:-540} python3 bench/step_time.py train --steps 60 --batch-tokens 786432 \
  --window 10:20 --window 30:60 --loss-at 10 20 30 40 50 60 --budget ${BUDGET:-420} \
  --config 0427_torch_varlen:RECIPE=2026-04-27,$c,DOC_ATTN_BACKEND=torch_varlen \
  --config 0427_torch_varlen:RECIPE=2026-04-27,$c,DOC_ATTN_BACKEND=torch_varlen \
  --config 0323 2>&1 | python3 -u .carry/stamp.py | tee $OUT/train.txt | tail -20
