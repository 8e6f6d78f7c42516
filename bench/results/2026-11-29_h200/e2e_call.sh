#!/usr/bin/env bash
# RECIPE=2026-04-27 end to end on one H200: 120 s of training (MAX_WALLCLOCK_SECONDS=128, GPTQ reserve 8 s), GPTQ +
# LQER, pergroup artifact, then every eval line through legal_ttt_exact with the new phase rule: eval_time and its
# split, the phase lines, bytes. 1,000 val documents: phases at 17/33/50 (the record's 2,500 of 50,000 scaled).
# TORCH_LOGS=recompiles shows any recompile of the TTT graph.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
{ nvidia-smi --query-gpu=name,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; nproc; date -u; } > $OUT/host.txt
export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model
export MAX_WALLCLOCK_SECONDS=128 WARMUP_STEPS=2 TRAIN_LOG_EVERY=50 TTT_PHASE_DOCS=17,33,50 SEED=42 RUN_ID=e2e
export PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
timeout -k 10 ${E2E_LIMIT:-560} python3 -m torch.distributed.run --standalone --nproc_per_node=1 train_gpt.py 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/e2e.log
grep -E "model_params|step:|val_loss|submission_bytes|ttt_phased|eval_time|legal_ttt|final_int6|Recompiling|guard fail" $OUT/e2e.log | tail -40
