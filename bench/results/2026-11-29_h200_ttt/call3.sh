#!/usr/bin/env bash
# One H200: call1.sh's "after" run again once the per-block compile's adapters come from one unbind per tensor (call 1
# indexed each slot: its backward added a full-size gradient per slot), empty caches; then its cost model.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma  # no artifact is written here (the image lacks brotli)
export PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles TORCHINDUCTOR_CACHE_DIR=/tmp/ind_unbind TRITON_CACHE_DIR=/tmp/tri_unbind
S=bench/results/2026-11-29_h200_ttt
timeout -k 5 170 python3 $S/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/unbind_cold.log
grep -E "result|ttt_phased:(done|phase)|Recompiling|Error" $OUT/unbind_cold.log | cut -c1-200
timeout -k 5 110 python3 bench/eval_speed.py warmup --budget 95 --repeats 3 --json $OUT/cost_unbind.json 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/cost_unbind.log
tail -32 $OUT/cost_unbind.log | cut -c1-160
