#!/usr/bin/env bash
# The first device call of 2026-11-27 (4 GPUs of one host), from the repo root: four benchmarks side by side.
#   gpu0: issue 30's compare table (04-27 documents vs 04-09 vs 04-27 shuffled/dense), 200 steps x 131,072 tokens
#   gpu1: issue 31's table at world size 1 (trains logs/ttt1_model, then sliding / full TTT / phased LoRA TTT)
#   gpu2: issue 30's world-size-1 row (VAL_LOSS_EVERY=50, TORCH_LOGS=recompiles; py-spy dumps every 40 s, to see
#         where the looped in-training validation spends its time)
#   gpu3: a full RECIPE=2026-04-27 run through the end-of-run evaluation (pergroup artifact, phased TTT), then
#         bench/pergroup.py's encode/decode of that artifact on this GPU
export DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model
spy='python3 bench/recipe_0427_gpu.py --part world --worlds 1 --batch-tokens 131072 --budget 500 --out-dir $OUT/world1 &
bench=$!; while kill -0 $bench 2>/dev/null; do sleep 40; for p in $(pgrep -f train_gpt.py); do
  grep -qz SPY_ME=1 /proc/$p/environ 2>/dev/null && { date +%T; py-spy dump --pid $p; }; done; done >$OUT/spy.txt 2>&1; wait'
full='RECIPE=2026-04-27 ITERATIONS=300 TRAIN_BATCH_TOKENS=131072 MAX_WALLCLOCK_SECONDS=0 RUN_ID=full0427
python3 -m torch.distributed.run --standalone --nproc_per_node=1 train_gpt.py >$OUT/full0427.txt 2>&1
cp logs/full0427/final_model.int6.ptz $OUT/full0427.ptz
python3 bench/pergroup.py logs/full0427/final_model.int6.ptz --no-lrzip --no-brotli --json $OUT/pergroup_gpu.json'
exec bash bench/on_gpus.sh 550 \
  "python3 bench/recipe_0427_gpu.py --batch-tokens 131072 --budget 520 --out-dir \$OUT/compare" \
  "ITERATIONS=400 python3 bench/ttt_phased_gpu.py --out \$OUT/ttt1 && cp logs/ttt1_model/final_model.int6.ptz \$OUT/ttt1.ptz" \
  "SPY_ME=1 TORCH_LOGS=recompiles $spy" \
  "$full"
