#!/usr/bin/env bash
# One H200 capped at 79 GiB (cap80.py), RECIPE=2026-04-27 end to end in one process: 120 s of training
# (MAX_WALLCLOCK_SECONDS=128, GPTQ reserve 8 s), GPTQ + LQER, pergroup artifact, then every eval through
# legal_ttt_exact on the 998 CaseOps val documents (phases 8/17/25): the TTT's graphs and pool on top of what
# training left cached. A single process (no torchrun), so cap80.py prints the run's peaks at exit.
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model
export MAX_WALLCLOCK_SECONDS=128 WARMUP_STEPS=2 TRAIN_LOG_EVERY=50 TTT_PHASE_DOCS=8,17,25 SEED=42 RUN_ID=cap80
export PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_e2e TRITON_CACHE_DIR=/tmp/tri_e2e
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout -k 10 500 python3 bench/results/2026-11-29_h200_80gb/cap80.py train_gpt.py 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/e2e_cap.log
grep -E "cap80|step:|peak memory|bytes|ttt_phased:(start|done)|eval_time|legal_ttt|Error|error" $OUT/e2e_cap.log \
  | cut -c1-200 | tail -30
