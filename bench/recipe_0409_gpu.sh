#!/usr/bin/env bash
# Issue 22's GPU checks of RECIPE=2026-04-09 on one GPU. Each call stays under DEADLINE seconds (default 530, for
# a 9-minute limit) and every part has its own timeout. Parts (PARTS, default "recipe pipeline"):
#   recipe    bench/step_time.py at the recipe's config (786,432 tokens per step = 8 micro-batches of the record's
#             48 x 2048 per GPU; looping switches on at 35% = step 70 of ITERATIONS=200; no wallclock cap;
#             WARMUP_STEPS=3: the plain and the looped graph still compile off the clock): ms/step before looping
#             (steps 10-70) and after (80 to the last logged step), peak memory, train loss at steps 50/100/150/200.
#   pipeline  the whole end of a run, short: RECIPE=2026-04-09, ITERATIONS=100 of 65,536 tokens (looping on at
#             step 35), GPTQ from 16 calibration batches, brotli, round trip, sliding window and legal TTT on the
#             whole val set; eager (PIPELINE_TORCH_COMPILE=1 compiles it: minutes more); prints its final lines.
#   kernels   fused kernels (QK_KERNEL/MLP_KERNEL auto) vs QK_KERNEL=torch MLP_KERNEL=torch, both at the `recipe`
#             config in one bench/step_time.py call, each stopped after 250 s and reported with the steps it
#             reached (past step 80, so both windows have numbers). Each run compiles two graphs (~1.5 min), so
#             this part does not fit next to the others: run it as a second call, PARTS=kernels.
# Data: DATA_PATH, TOKENIZER_PATH (default .carry/wiki8192 and .carry/sp8192.model). A brotli wheel in .whl/ is
# installed to /tmp/site when the Python lacks brotli. Logs go under $OUT (default /tmp/recipe_0409_gpu).
#   bash bench/recipe_0409_gpu.sh && PARTS=kernels bash bench/recipe_0409_gpu.sh    (two calls)
set -uo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
DEADLINE=${DEADLINE:-530}
PARTS=${PARTS:-recipe pipeline}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/recipe_0409_gpu}
mkdir -p "$OUT"
export RECIPE=2026-04-09 DATA_PATH=${DATA_PATH:-.carry/wiki8192} TOKENIZER_PATH=${TOKENIZER_PATH:-.carry/sp8192.model}
export PYTHONUNBUFFERED=1

left() { echo $(( DEADLINE - (SECONDS - started) )); }

source bench/gpu_preflight.sh
gpu_preflight recipe_0409_gpu
"$PY" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__,
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no CUDA device')"
echo "data: $DATA_PATH ($(ls "$DATA_PATH" | tr '\n' ' ')) tokenizer: $TOKENIZER_PATH"

status=0
step_time() {  # PART LIMIT_PER_RUN CONFIG...: bench/step_time.py at the recipe's config, 200 steps, one table
  local part=$1 per_run=$2; shift 2
  local budget=$(( $(left) - 10 ))
  timeout --kill-after=10 $(( budget + 20 )) "$PY" bench/step_time.py --steps 200 --loss-at 50 100 150 200 \
      --window 10:70 --window 80: --timeout "$per_run" --budget "$budget" --out-dir "$OUT/$part" "$@" \
    || { echo "step_time: exit $? (a run stopped at its time limit is reported with the steps it logged)"; status=1; }
  grep "^qk_kernel:\|^mlp_kernel:\|^attention_backend:\|^model_params:\|^layer_loop:" "$OUT/$part"/*.log
}
if [[ " $PARTS " == *" recipe "* ]]; then
  echo "== recipe: RECIPE=2026-04-09, 200 steps, at most 330 s"
  step_time recipe 330 --config recipe:WARMUP_STEPS=3
fi
if [[ " $PARTS " == *" kernels "* ]]; then
  echo "== kernels: fused vs torch, 250 s each"
  step_time kernels 250 --config fused:WARMUP_STEPS=3 --config torch_kernels:WARMUP_STEPS=3,QK_KERNEL=torch,MLP_KERNEL=torch
fi

if [[ " $PARTS " == *" pipeline "* ]]; then
  limit=$(( $(left) - 5 ))
  run_id=recipe_0409_pipeline_$(date +%H%M%S)
  echo "== pipeline: RUN_ID=$run_id, ${limit} s at most"
  if [ "$limit" -lt 60 ]; then
    echo "pipeline: skipped, ${limit} s left (PARTS=pipeline runs it alone)"; status=1
  else
    TORCH_COMPILE=${PIPELINE_TORCH_COMPILE:-0} RUN_ID=$run_id ITERATIONS=100 TRAIN_BATCH_TOKENS=65536 \
    MAX_WALLCLOCK_SECONDS=0 WARMUP_STEPS=3 VAL_LOSS_EVERY=0 TRAIN_LOG_EVERY=10 EMA_DECAY=0.97 \
    GPTQ_CALIBRATION_BATCHES=16 \
      timeout --signal=TERM --kill-after=10 "$limit" "$PY" -m torch.distributed.run --standalone \
      --nproc_per_node=1 train_gpt.py > "$OUT/pipeline.console.txt" 2>&1
    code=$?
    cp "logs/$run_id.txt" "$OUT/" 2>/dev/null
    echo "pipeline: exit $code$([ $code -eq 124 ] && echo ' (stopped at its time limit)'); its final lines:"
    grep -E "^(step:100/|layer_loop:|peak memory|DIAGNOSTIC|GPTQ:|timing_quantize|Code size|Serialized model|Total \
submission|submission_bytes|final_int6|legal_ttt|ttt_sliding:done|error|outputs:)" "$OUT/pipeline.console.txt" \
      || tail -20 "$OUT/pipeline.console.txt"
    [ $code -eq 0 ] || status=1
  fi
fi
echo "recipe_0409_gpu: done in $(( SECONDS - started )) s; logs in $OUT"
exit $status
