#!/usr/bin/env bash
# One H200: as call1.sh's "after" run, for the other form of the per-block compile: the whole LoRA'd forward one graph
# (as before) with each block call a nested compile region (.carry/train_gpt_regions.py), empty caches; then its
# cost model (bench/eval_speed.py warmup) with that file as train_gpt.py.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma  # no artifact is written here (the image lacks brotli)
export PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles TORCHINDUCTOR_CACHE_DIR=/tmp/ind_regions TRITON_CACHE_DIR=/tmp/tri_regions
S=bench/results/2026-11-29_h200_ttt
TRAINER=.carry/train_gpt_regions.py timeout -k 5 240 python3 $S/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/regions_cold.log
grep -E "result|ttt_phased:(done|phase)|Recompiling|Error" $OUT/regions_cold.log | cut -c1-200
cp .carry/train_gpt_regions.py train_gpt.py
timeout -k 5 150 python3 bench/eval_speed.py warmup --budget 130 --repeats 3 --json $OUT/cost_regions.json 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/cost_regions.log
tail -32 $OUT/cost_regions.log | cut -c1-160
