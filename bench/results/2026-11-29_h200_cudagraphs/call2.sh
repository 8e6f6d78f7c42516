#!/usr/bin/env bash
# One H200: the trainer at this commit (TTT_CUDA_GRAPHS=1, its default: every (rows, length) shape's graphs recorded
# in the warm-up): a cold ttt_eval (199 documents, empty caches), its cost grid on the warm cache (replays only), then
# the same eval with TTT_CUDA_GRAPHS=0 on that cache (same process kind, same data: the loop without graphs).
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_land TRITON_CACHE_DIR=/tmp/tri_land
S=bench/results/2026-11-29_h200_ttt
timeout -k 5 300 python3 $S/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/cg_cold.log
grep -E "result|ttt_phased:(start|done|batch)|Error|Traceback" $OUT/cg_cold.log | cut -c1-220 | head -20
timeout -k 5 120 python3 bench/eval_speed.py warmup --budget 105 --repeats 3 --json $OUT/cost_cg.json 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/cost_cg.log
grep -vE "^ *[0-9.]+ +(W|I|V)[0-9]{4}" $OUT/cost_cg.log | tail -40 | cut -c1-160
grep peak_mib $OUT/cost_cg.json
TTT_CUDA_GRAPHS=0 timeout -k 5 120 python3 $S/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/nocg_warm.log
grep -E "result|ttt_phased:(start|done|batch)|Error|Traceback" $OUT/nocg_warm.log | cut -c1-220 | head -20
