#!/usr/bin/env bash
# One H200 with the allocator capped at 79 GiB (cap80.py): does the 04-27 recipe's phased TTT eval fit an H100 80 GB?
# 1) `eval_speed.py warmup` stopped after the warm-up: a LoRA step and its CUDA-graph capture at every one of the 36
#    shapes (the largest, 64 rows x 2,048, among them), all in the graphs' shared pool; cold caches.
# 2) the whole phased TTT eval on the 998 CaseOps val documents (phases 8/17/25): the global SGD phases run while the
#    pool of the rank's captured steps stays reserved; the first run's warm cache.
set -u
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_cap TRITON_CACHE_DIR=/tmp/tri_cap
R=bench/results/2026-11-29_h200_80gb
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout -k 5 200 python3 $R/cap80.py bench/eval_speed.py warmup --budget 1 --json $OUT/warmup_cap.json 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/warmup_cap.log
grep -E "cap80|warm_up_lora_ttt|peak|Error|Trace" $OUT/warmup_cap.log | cut -c1-200
DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=8,17,25 SEED=42 \
  timeout -k 5 200 python3 $R/cap80.py bench/results/2026-11-29_h200_stepgraphs/ttt_eval.py 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/ttt_1gpu_cap.log
grep -E "cap80|result|ttt_phased:(start|done|phase)|Error|Trace" $OUT/ttt_1gpu_cap.log | cut -c1-220
