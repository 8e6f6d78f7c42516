#!/bin/bash
# 2xH200: the current ops (q/k/v, XSA, MLP) under torchrun: 1 GPU x GA8 vs 2 GPUs x GA4 (same tokens per step),
# then the whole end-of-run pipeline on 2 GPUs.
export DATA_PATH=.carry/wiki TOKENIZER_PATH=.carry/sp1024.model PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
T0=$(date +%s)
EQ="ITERATIONS=20 WARMDOWN_ITERS=0 MAX_WALLCLOCK_SECONDS=0 VAL_LOSS_EVERY=0 FINAL_EVAL=0 TRAIN_LOG_EVERY=1 WARMUP_STEPS=3 GRAD_CLIP_NORM=0"
env $EQ RUN_ID=eq_1gpu timeout 150 torchrun --standalone --nproc_per_node=1 train_gpt.py > $OUT/eq_1gpu.log 2>&1; echo "1gpu rc=$? $(( $(date +%s) - T0 )) s"
env $EQ RUN_ID=eq_2gpu timeout 150 torchrun --standalone --nproc_per_node=2 train_gpt.py > $OUT/eq_2gpu.log 2>&1; echo "2gpu rc=$? $(( $(date +%s) - T0 )) s"
grep -h "kernel\|^step:\(1\|2\|5\|10\|20\)/" $OUT/eq_1gpu.log $OUT/eq_2gpu.log | grep -v "^warmup"
ITERATIONS=20 WARMUP_STEPS=2 VAL_LOSS_EVERY=0 TRAIN_LOG_EVERY=10 RUN_ID=x2_full timeout 240 torchrun --standalone --nproc_per_node=2 train_gpt.py > $OUT/x2_full.log 2>&1
echo "full rc=$? $(( $(date +%s) - T0 )) s"
grep -E "qk_kernel|step:20/20|final_|legal_ttt|post_ema|Error|error|Traceback" $OUT/x2_full.log | head -20
