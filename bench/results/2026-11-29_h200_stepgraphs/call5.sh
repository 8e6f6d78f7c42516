#!/usr/bin/env bash
# Two H200s: the score of a trained artifact before and after (same artifact, same phases). A short eager
# RECIPE=2026-04-27 training (150 steps of 131,072 tokens, TTT off) on .carry/wiki_caseops_v200, then its phased TTT
# eval, compiled, empty caches, at the same time on the two GPUs: with the landed trainer (HEAD before this change:
# one compiled graph of the LoRA forward, CUDA graphs by torch.compile's reduce-overhead mode) and with this one.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=bench/results/2026-11-29_h200_stepgraphs
ITERATIONS=150 TORCH_COMPILE=0 timeout -k 5 200 python3 bench/eval_speed.py evals --nproc 1 --parts none \
  --out $OUT/art 2>&1 | python3 -u .carry/stamp.py | tail -3
A=logs/art_model/final_model.int6.ptz; ls -la $A || exit 1
grep -E "step:150|final_int6|submission_bytes" $OUT/art/train.log | cut -c1-200
CUDA_VISIBLE_DEVICES=0 TRAINER=.carry/train_gpt_landed.py ARTIFACT=$A TORCHINDUCTOR_CACHE_DIR=/tmp/ind5a \
  TRITON_CACHE_DIR=/tmp/tri5a timeout -k 5 240 python3 $R/artifact_eval.py > $OUT/art_landed.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 ARTIFACT=$A TORCHINDUCTOR_CACHE_DIR=/tmp/ind5b TRITON_CACHE_DIR=/tmp/tri5b \
  timeout -k 5 240 python3 $R/artifact_eval.py > $OUT/art_new.log 2>&1
wait
grep -E "result|ttt_phased:(start|done)|Error|Traceback" $OUT/art_landed.log $OUT/art_new.log | cut -c1-220
