#!/usr/bin/env bash
# One H200: the committed trainer (after the edits listed at the end of the README): a cold phased TTT eval on the
# 199 documents (empty caches), then the same with TTT_CUDA_GRAPHS=0 on that warm cache (the same kernels).
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind6 TRITON_CACHE_DIR=/tmp/tri6
R=bench/results/2026-11-29_h200_stepgraphs
show() { grep -E "result|ttt_phased:(start|done)|Recompiling|Error|error|Traceback" $1 | cut -c1-200 | head -12; }
timeout -k 5 150 python3 $R/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/final_cold.log; show $OUT/final_cold.log
TTT_CUDA_GRAPHS=0 timeout -k 5 80 python3 $R/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/final_nograph_warm.log
show $OUT/final_nograph_warm.log
