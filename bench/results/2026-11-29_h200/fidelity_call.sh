#!/usr/bin/env bash
# RECIPE=2026-04-27 before (4174a39, the parent of the fidelity work: .carry/train_gpt_before_packedval.py, its
# train_gpt.py with plain_eval's documents-packed rows patched in so both ends are measured alike) or after (this
# tree): bash fidelity_call.sh before|after. Seed 42, 200 steps at the record's micro-batch (786,432 tokens per step
# = 8 micro-steps of 98,304 at world size 1), alone on one H200: train_loss every 25 steps, the validation at the
# end over documents-packed rows of 98,304 tokens (VAL_BATCH_SIZE=786432), step_avg. Data: the bundled corpus's CaseOps
# shards with 199 val documents (.carry/wiki_caseops_v200).
set -u
which=$1
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
{ nvidia-smi --query-gpu=name,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; nproc; date -u; } > $OUT/host.txt
export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model ITERATIONS=200
export MAX_WALLCLOCK_SECONDS=0 WARMUP_STEPS=2 TRAIN_LOG_EVERY=25 VAL_LOSS_EVERY=0 VAL_BATCH_SIZE=786432 FINAL_EVAL=0
export SEED=42 PYTHONUNBUFFERED=1
script=train_gpt.py; [ $which = before ] && script=.carry/train_gpt_before_packedval.py
RUN_ID=$which timeout -k 10 ${LIMIT:-575} python3 -m torch.distributed.run --standalone --nproc_per_node=1 $script 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/fidelity_$which.log
grep -E "step:(1|25|50|75|100|125|150|175|200)/|layer_loop|val_loss|peak|rror" $OUT/fidelity_$which.log | tail -16
