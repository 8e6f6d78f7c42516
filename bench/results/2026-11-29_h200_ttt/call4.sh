#!/usr/bin/env bash
# One H200: the spread between cold compiles: call1.sh's before (9ffe9ba) and call3.sh's after runs once more each,
# each with new empty Inductor and Triton caches (Triton's autotuning may pick other kernels on each cold compile).
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma  # no artifact is written here (the image lacks brotli)
export PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
S=bench/results/2026-11-29_h200_ttt
run() {  # name trainer cache limit
  TRAINER=$2 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$3 TRITON_CACHE_DIR=/tmp/tri_$3 timeout -k 5 $4 python3 $S/ttt_eval.py 2>&1 \
    | python3 -u .carry/stamp.py > $OUT/$1.log
  grep -E "result|ttt_phased:done|Error" $OUT/$1.log | cut -c1-200
}
run after_cold2 train_gpt.py after2 120
run before_cold2 .carry/train_gpt_9ffe9ba.py before2 230
