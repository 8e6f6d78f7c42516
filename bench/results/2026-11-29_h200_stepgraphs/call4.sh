#!/usr/bin/env bash
# Two H200s of one host: this commit's trainer on the 500-document CaseOps val set (.carry/wiki_caseops, phases at
# 8/17/25 documents): a cold phased TTT eval on 2 GPUs (torchrun, empty caches), then on 1 GPU (the warm cache).
set -u
export DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=8,17,25 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind4 TRITON_CACHE_DIR=/tmp/tri4
R=bench/results/2026-11-29_h200_stepgraphs
show() { grep -E "result|ttt_phased:(start|done)|Error|error|Traceback" $1 | cut -c1-220 | head -12; }
nvidia-smi --query-gpu=name,memory.used --format=csv,noheader
timeout -k 10 230 torchrun --standalone --nproc_per_node=2 $R/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py \
  > $OUT/ttt_2gpu_cold.log; show $OUT/ttt_2gpu_cold.log
for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do kill -9 $pid; done
timeout -k 5 150 python3 $R/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/ttt_1gpu_warm.log
show $OUT/ttt_1gpu_warm.log
