#!/usr/bin/env bash
# RECIPE=2026-04-27 before (4174a39, the parent of the fidelity work) and after (this tree), seed 42, 200 steps at
# the record's micro-batch (786,432 tokens per step = 8 micro-steps of 98,304 at world size 1), side by side on one
# H200: train_loss every 25 steps, the validation at the end, step_avg. Data: the bundled-corpus CaseOps shards.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
{ nvidia-smi --query-gpu=name,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; nproc; date -u; } > $OUT/host.txt
export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model ITERATIONS=200
export MAX_WALLCLOCK_SECONDS=0 WARMUP_STEPS=2 TRAIN_LOG_EVERY=25 VAL_LOSS_EVERY=0 FINAL_EVAL=0 SEED=42
export PYTHONUNBUFFERED=1
for which in before after; do
  script=train_gpt.py; [ $which = before ] && script=.carry/train_gpt_before.py
  (RUN_ID=$which timeout -k 10 500 python3 -m torch.distributed.run --standalone --nproc_per_node=1 $script 2>&1 \
     | python3 -u .carry/stamp.py > $OUT/$which.log) &
  sleep 2
done
wait
for which in before after; do echo "== $which"; grep -E "step:(1|25|50|75|100|125|150|175|200)/|val_loss|peak" $OUT/$which.log | tail -14; done
