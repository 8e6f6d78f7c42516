#!/usr/bin/env bash
# One H200: where the phased TTT's cold warm-up compile spends its seconds. `eval_speed.py warmup` stopped after the
# warm-up (--budget 1), the seeded RECIPE=2026-04-27 model, every one of the 36 step shapes, empty caches: with
# Inductor's default compile workers, then with one (TORCHINDUCTOR_COMPILE_THREADS=1: Triton kernels compiled in the
# process, one at a time), then again on the first run's warm cache.
set -u
export PYTHONUNBUFFERED=1
echo "cpus: $(nproc)"
go() {  # name, limit, env...
  local name=$1 limit=$2; shift 2
  env "$@" timeout -k 5 $limit python3 bench/eval_speed.py warmup --budget 1 --json $OUT/$name.json 2>&1 \
    | python3 -u .carry/stamp.py > $OUT/$name.log
  grep -E "warm_up_lora_ttt|compile_inner|bw_compiler|async_compile.wait|GraphLowering.compile_to_module|Error|Trace" \
    $OUT/$name.log | cut -c1-200
}
go cold 200 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_a TRITON_CACHE_DIR=/tmp/tri_a
go cold_threads1 250 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_b TRITON_CACHE_DIR=/tmp/tri_b TORCHINDUCTOR_COMPILE_THREADS=1
go warm 100 TORCHINDUCTOR_CACHE_DIR=/tmp/ind_a TRITON_CACHE_DIR=/tmp/tri_a
