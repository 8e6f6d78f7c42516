#!/usr/bin/env bash
# One H200: the phased TTT of the seeded 04-27 model on 199 val documents (phases 3/7/10), each with empty Inductor
# and Triton caches: after (the per-block compile), before (9ffe9ba's whole-forward graph), then after again on its
# warm cache; then bench/eval_speed.py warmup's cost model (ms per LoRA step) for the after code.
set -u
{ nvidia-smi --query-gpu=name,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; nproc; date -u; } > $OUT/host.txt
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma  # no artifact is written here (the image lacks brotli)
export PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
S=bench/results/2026-11-29_h200_ttt
run() {  # name trainer cache limit
  TRAINER=$2 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$3 TRITON_CACHE_DIR=/tmp/tri_$3 timeout -k 5 $4 python3 $S/ttt_eval.py 2>&1 \
    | python3 -u .carry/stamp.py > $OUT/$1.log
  grep -E "result|ttt_phased:(done|phase)|Recompiling|Error" $OUT/$1.log | cut -c1-200
}
run after_cold train_gpt.py after 170
run before_cold .carry/train_gpt_9ffe9ba.py before 230
run after_warm train_gpt.py after 80
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_after TRITON_CACHE_DIR=/tmp/tri_after timeout -k 5 100 python3 bench/eval_speed.py warmup \
  --budget 85 --repeats 3 --json $OUT/cost_after.json 2>&1 | python3 -u .carry/stamp.py > $OUT/cost_after.log
grep -v "^ *[0-9.]* *$" $OUT/cost_after.log | tail -30 | cut -c1-160
