#!/usr/bin/env bash
# One H200: call3.sh's "after" run (9ffe9ba + per_block_compile.patch, as .carry/train_gpt_perblock.py) with
# TORCHINDUCTOR_DETERMINISTIC=1 (Inductor makes no timing-based choices), empty caches.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma  # no artifact is written here (the image lacks brotli)
export PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles TORCHINDUCTOR_CACHE_DIR=/tmp/ind_det TRITON_CACHE_DIR=/tmp/tri_det
export TORCHINDUCTOR_DETERMINISTIC=1
TRAINER=.carry/train_gpt_perblock.py timeout -k 5 130 python3 bench/results/2026-11-29_h200_ttt/ttt_eval.py 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/call5_after_cold_deterministic.log
grep -E "result|ttt_phased:(done|phase)|Error" $OUT/call5_after_cold_deterministic.log | cut -c1-200
