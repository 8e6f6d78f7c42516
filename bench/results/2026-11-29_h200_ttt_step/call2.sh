#!/usr/bin/env bash
# One H200: the adapters' AdamW fused (train_gpt.py at this commit) in the per-block compile
# (.carry/train_gpt_perblock_fused.py = .carry/train_gpt_perblock.py + the same fused AdamW) and in the whole-forward
# graph: each a cold ttt_eval (199 documents) then its cost grid on the warm cache; last the whole graph with the
# foreach AdamW (.carry/train_gpt_9ffe9ba.py) on the same warm cache: the same kernels, only the optimizer differs.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
S=bench/results/2026-11-29_h200_ttt
eval_run() {  # name trainer cache limit
  TRAINER=$2 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$3 TRITON_CACHE_DIR=/tmp/tri_$3 timeout -k 5 $4 python3 $S/ttt_eval.py \
    2>&1 | python3 -u .carry/stamp.py > $OUT/$1.log
  grep -E "result|ttt_phased:done|Error" $OUT/$1.log | cut -c1-200
}
grid() {  # name cache limit (the trainer is ./train_gpt.py)
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$2 TRITON_CACHE_DIR=/tmp/tri_$2 timeout -k 5 $3 python3 bench/eval_speed.py warmup \
    --budget $(($3 - 20)) --repeats 3 --json $OUT/$1.json 2>&1 | python3 -u .carry/stamp.py > $OUT/$1.log
  grep -E "warm_up_lora|^ *[0-9.]+ +(2|64) +(64|2048) |RECIPE" $OUT/$1.log | cut -c1-120
}
cp train_gpt.py /tmp/train_gpt_fused.py
cp .carry/train_gpt_perblock_fused.py train_gpt.py  # this copy of the tree only
eval_run perblock_fused_cold train_gpt.py pb 140
grid cost_perblock_fused pb 80
cp /tmp/train_gpt_fused.py train_gpt.py
eval_run whole_fused_cold train_gpt.py whole 250
grid cost_whole_fused whole 80
eval_run whole_foreach_warm .carry/train_gpt_9ffe9ba.py whole 70
