#!/usr/bin/env bash
# One H200, empty caches for each: this commit's trainer (the first block's input made to require grad: no graph of
# its own; TTT_WARMUP_SHAPES=rank by default): a cold ttt_eval (199 documents), then a cold `eval_speed.py warmup`
# (every shape: the first step's compile seconds, each shape's first step and capture, the step grid).
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
R=bench/results/2026-11-29_h200_stepgraphs
show() { grep -E "result|ttt_phased:(start|done|batch)|Recompiling|Error|error|Traceback" $1 | cut -c1-200 | head -20; }
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind3_a TRITON_CACHE_DIR=/tmp/tri3_a
timeout -k 5 170 python3 $R/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/sg2_cold.log; show $OUT/sg2_cold.log
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind3_b TRITON_CACHE_DIR=/tmp/tri3_b
timeout -k 5 170 python3 bench/eval_speed.py warmup --budget 150 --repeats 3 --json $OUT/cost_sg2.json 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/cost_sg2.log
grep -vE "^ *[0-9.]+ +(W|I|V)[0-9]{4}" $OUT/cost_sg2.log | grep -vE "^ *[0-9.]+ *$" | tail -85 | cut -c1-160
