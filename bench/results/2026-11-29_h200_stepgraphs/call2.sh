#!/usr/bin/env bash
# One H200, empty caches for each: `eval_speed.py warmup` (the warm-up's first step at each shape and its capture
# timed, then the step grid) with the start-up's attention choice (cuDNN), then with ATTN_BACKEND=flash.
set -u
export COMPRESSOR=lzma PYTHONUNBUFFERED=1
for backend in auto flash; do
  export TORCHINDUCTOR_CACHE_DIR=/tmp/ind2_$backend TRITON_CACHE_DIR=/tmp/tri2_$backend
  ATTN_BACKEND=$backend timeout -k 5 200 python3 bench/eval_speed.py warmup --budget 170 --repeats 3 \
    --json $OUT/cost_$backend.json 2>&1 | python3 -u .carry/stamp.py > $OUT/cost_$backend.log
  grep -vE "^ *[0-9.]+ +(W|I|V)[0-9]{4}" $OUT/cost_$backend.log | tail -95 | cut -c1-160
done
