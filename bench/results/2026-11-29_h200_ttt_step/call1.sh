#!/usr/bin/env bash
# One H200: where a LoRA step's time goes (step_profile.py) for the per-block compile (.carry/train_gpt_perblock.py,
# Inductor's deterministic mode: its slow kernel choice), the same with a fused AdamW (warm cache), and the whole-
# forward graph of 9ffe9ba's train_gpt.py (cold), each a fresh process. (step_profile.py then timed 10 steps per shape, now 20.)
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model SEED=42 COMPRESSOR=lzma
export PYTHONUNBUFFERED=1
S=bench/results/2026-11-29_h200_ttt_step
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv > $OUT/host.txt
python3 -c "import torch; print(torch.__version__)" >> $OUT/host.txt
run() {  # name, timeout, env...
  local name=$1 limit=$2; shift 2
  env "$@" timeout -k 5 $limit python3 $S/step_profile.py 2>&1 | python3 -u .carry/stamp.py > $OUT/$name.log
  grep -E "warm-up|====|Error|error" $OUT/$name.log | cut -c1-160
}
run perblock_det 150 FUSED_ADAMW=0 TRAINER=.carry/train_gpt_perblock.py TORCHINDUCTOR_DETERMINISTIC=1 \
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pb TRITON_CACHE_DIR=/tmp/tri_pb
run perblock_det_fused 90 TRAINER=.carry/train_gpt_perblock.py TORCHINDUCTOR_DETERMINISTIC=1 FUSED_ADAMW=1 \
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pb TRITON_CACHE_DIR=/tmp/tri_pb
run whole 260 FUSED_ADAMW=0 TRAINER=train_gpt.py TORCHINDUCTOR_CACHE_DIR=/tmp/ind_whole TRITON_CACHE_DIR=/tmp/tri_whole
