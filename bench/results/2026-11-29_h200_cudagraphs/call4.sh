#!/usr/bin/env bash
# One H200: the fused AdamW's effect on the score of a trained artifact. A short RECIPE=2026-04-27 training (150
# steps of 131,072 tokens, TTT off, eager: TORCH_COMPILE=0) on .carry/wiki_caseops_v200, then its phased TTT eval
# (eager: the same kernels in both runs, only the adapters' optimizer differs) with train_gpt.py (fused AdamW) and with
# .carry/train_gpt_9ffe9ba.py (its parent's foreach AdamW; nothing else differs), each `bench/eval_speed.py evals`.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model COMPRESSOR=lzma ITERATIONS=150
export TORCH_COMPILE=0 PYTHONUNBUFFERED=1
timeout -k 5 430 python3 bench/eval_speed.py evals --nproc 1 --parts phased --out $OUT/fused 2>&1 \
  | python3 -u .carry/stamp.py | tail -12
cp -r logs/fused_model $OUT/ 2>/dev/null; rm -f $OUT/fused_model/*.ptz $OUT/fused_model/*.pt
cp .carry/train_gpt_9ffe9ba.py train_gpt.py  # this copy of the tree only
timeout -k 5 140 python3 bench/eval_speed.py evals --nproc 1 --parts phased --out $OUT/foreach \
  --artifact logs/fused_model/final_model.int6.ptz 2>&1 | python3 -u .carry/stamp.py | tail -8
