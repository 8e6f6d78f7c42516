#!/usr/bin/env bash
# One H200: the per-block compile with each LoRA training step captured whole as one CUDA graph per (rows, length)
# (this commit's trainer, TTT_CUDA_GRAPHS=1): a cold ttt_eval (199 documents, empty caches); the same eval with
# TTT_CUDA_GRAPHS=0 on that warm cache (the same compiled kernels: the score check of the capture); the cost grid
# (replays); a cold ttt_eval with TTT_WARMUP_SHAPES=rank (fresh empty caches).
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_sg TRITON_CACHE_DIR=/tmp/tri_sg
S=bench/results/2026-11-29_h200_ttt
show() { grep -E "result|ttt_phased:(start|done|batch)|Recompiling|Error|error|Traceback" $1 | cut -c1-200 | head -20; }
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout -k 5 200 python3 $S/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/sg_cold.log; show $OUT/sg_cold.log
TTT_CUDA_GRAPHS=0 timeout -k 5 100 python3 $S/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/nosg_warm.log
show $OUT/nosg_warm.log
timeout -k 5 100 python3 bench/eval_speed.py warmup --budget 85 --repeats 3 --json $OUT/cost_sg.json 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/cost_sg.log
grep -vE "^ *[0-9.]+ +(W|I|V)[0-9]{4}" $OUT/cost_sg.log | tail -48 | cut -c1-160
grep peak_mib $OUT/cost_sg.json
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_rank TRITON_CACHE_DIR=/tmp/tri_rank
TTT_WARMUP_SHAPES=rank timeout -k 5 150 python3 $S/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/sg_rank_cold.log
show $OUT/sg_rank_cold.log
