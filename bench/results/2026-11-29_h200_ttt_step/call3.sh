#!/usr/bin/env bash
# One H200: is the per-block compile's slow mode Python's garbage collector? step_profile.py on
# .carry/train_gpt_perblock_fused.py, two cold compiles (own caches), each timing its steps with the default GC (and
# counting the collections), then after gc.freeze().
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model SEED=42 COMPRESSOR=lzma
export PYTHONUNBUFFERED=1 GC_AB=1 PROFILE=0 SHAPES=2:64,2:2048,64:64,64:2048 TRAINER=.carry/train_gpt_perblock_fused.py
S=bench/results/2026-11-29_h200_ttt_step
for n in 1 2; do
  TORCHINDUCTOR_CACHE_DIR=/tmp/ind_gc$n TRITON_CACHE_DIR=/tmp/tri_gc$n timeout -k 5 150 python3 $S/step_profile.py 2>&1 \
    | python3 -u .carry/stamp.py > $OUT/perblock_gc$n.log
  grep -E "warm-up|gc|wall|Error" $OUT/perblock_gc$n.log | cut -c1-200
done
