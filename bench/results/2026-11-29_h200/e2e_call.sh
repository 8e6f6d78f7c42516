#!/usr/bin/env bash
# RECIPE=2026-04-27 end to end on one H200: 120 s of training (MAX_WALLCLOCK_SECONDS=128, GPTQ reserve 8 s), GPTQ +
# LQER, pergroup artifact, then every eval line through legal_ttt_exact with the phase rule of docs/ttt_phased.md:
# eval_time and its split, the phase lines, bytes. 199 val documents (.carry/wiki_caseops_v200): phases at 3/7/10,
# the record's 833/1,666/2,500 of 50,000 scaled. TORCH_LOGS=recompiles shows any recompile of the TTT graph.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
{ nvidia-smi --query-gpu=name,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; nproc; date -u; } > $OUT/host.txt
export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model
export MAX_WALLCLOCK_SECONDS=128 WARMUP_STEPS=2 TRAIN_LOG_EVERY=50 TTT_PHASE_DOCS=3,7,10 SEED=42 RUN_ID=e2e
export PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
timeout -k 10 ${E2E_LIMIT:-570} python3 -m torch.distributed.run --standalone --nproc_per_node=1 train_gpt.py 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/e2e.log
cp logs/e2e.txt $OUT/e2e_trainer_log.txt 2>/dev/null
grep -E "model_params|step:|val_loss|bytes|ttt_phased|eval_time|legal_ttt|final_int6|Recompiling|guard fail|Error|error" $OUT/e2e.log | grep -v "^.\{0,12\}\[rank0\]:V.*User stack\|^.\{0,12\}\[rank0\]:V.* -   " | tail -60
