#!/usr/bin/env bash
# Device call 1 of the third 2026-11-27 session, 4 GPUs of one host, from the repo root. Files back: $OUT/all.tgz
# (every log) and $OUT/w4_0427.ptz (the artifact, for the lrzip rows here).
#   A (4 GPUs, 320 s): RECIPE=2026-04-27 at world size 4, 400 steps x 131,072 tokens, validation every 100 steps,
#     TTT off, COMPRESSOR=pergroup, EMA_DECAY=0.99 (the recipe's 0.9965 would leave ~25% of the initial weights in a
#     400-step EMA), through the sliding-window eval: issue 30's world-size-4 row and the artifact of issues 31, 33.
#   B (side by side, 230 s, bench/on_gpus.sh): gpu0 the same run at world size 1 (FINAL_EVAL=0: training only);
#     gpu1 bench/pergroup.py on the artifact (nearest-neighbour chains on the GPU); gpu2 bench/ttt_startup_gpu.py;
#     gpu3 bench/ttt_phased_gpu.py at world size 1 on the artifact (phased, sliding, full).
set -u
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH
{ nvidia-smi --query-gpu=name,memory.total --format=csv; python3 -c "import torch; print(torch.__version__)"; nproc; } > $OUT/host.txt
cat > /tmp/stamp.py <<'PY'
import sys, time
start = time.time()
for line in sys.stdin:
    sys.stdout.write("%7.1f %s" % (time.time() - start, line))
    sys.stdout.flush()
PY
cat > /tmp/common.sh <<'SH'
export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model ITERATIONS=400
export TRAIN_BATCH_TOKENS=131072 MAX_WALLCLOCK_SECONDS=0 WARMUP_STEPS=3 VAL_LOSS_EVERY=100 TRAIN_LOG_EVERY=10
export EMA_DECAY=0.99 PYTHONUNBUFFERED=1
SH
(
  . /tmp/common.sh
  export TTT_ENABLED=0 COMPRESSOR=pergroup RUN_ID=w4_0427
  timeout -k 10 320 python3 -m torch.distributed.run --standalone --nproc_per_node=4 train_gpt.py 2>&1 \
    | python3 -u /tmp/stamp.py > $OUT/w4.log
)
cp logs/w4_0427/final_model.int6.ptz $OUT/w4_0427.ptz
tail -n 25 $OUT/w4.log
art=logs/w4_0427/final_model.int6.ptz
OUT=$OUT/b bash bench/on_gpus.sh 230 \
  ". /tmp/common.sh; export FINAL_EVAL=0 RUN_ID=w1_0427; python3 -m torch.distributed.run --standalone --nproc_per_node=1 train_gpt.py 2>&1 | python3 -u /tmp/stamp.py > $OUT/w1.log" \
  "python3 bench/pergroup.py $art --no-lrzip --no-brotli --json $OUT/pergroup_gpu.json" \
  "python3 bench/ttt_startup_gpu.py --budget 210" \
  "python3 bench/ttt_phased_gpu.py --nproc 1 --artifact $art --parts phased,sliding,full --out $OUT/ttt1"
cp -r logs/w4_0427.txt logs/w1_0427.txt $OUT/ 2>/dev/null
tar czf /tmp/all.tgz -C $OUT --exclude=w4_0427.ptz . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
cp logs/w4_0427/final_model.int6.ptz $OUT/w4_0427.ptz 2>/dev/null
ls -la $OUT
