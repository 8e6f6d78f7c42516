#!/usr/bin/env bash
# Device call 3 of the third 2026-11-27 session (call 2 was `bench/ttt_phased_gpu.py --nproc 4` on call 1's
# artifact), 4 GPUs of one host, cold caches, from the repo root; everything lands in $OUT/all.tgz. Side by side
# (bench/on_gpus.sh, 540 s), after the warm-up change (one dynamic LoRA graph, the global SGD warmed up too):
#   gpu0 bench/ttt_phased_gpu.py at world size 1 on call 1's artifact (carried as .carry/w4_0427.ptz): phased,
#        sliding, full;
#   gpu1 bench/ttt_startup_gpu.py: start-up split, the warm-up, ms per LoRA step by row length and per global-SGD
#        step (the cost model of the 8xH100 estimate);
#   gpu2-3 the trainer end to end at world size 2 with the recipe's phased TTT (100 steps x 131,072 tokens,
#        COMPRESSOR=pergroup, TTT_PHASE_DOCS scaled as bench/ttt_phased_gpu.py does): every eval line of a record run.
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
art=.carry/w4_0427.ptz
e2e='export RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model ITERATIONS=100
export TRAIN_BATCH_TOKENS=131072 MAX_WALLCLOCK_SECONDS=0 WARMUP_STEPS=3 VAL_LOSS_EVERY=0 TRAIN_LOG_EVERY=10
export EMA_DECAY=0.99 COMPRESSOR=pergroup TTT_PHASE_DOCS=17,33,50 RUN_ID=e2e_w2 CUDA_VISIBLE_DEVICES=2,3 PYTHONUNBUFFERED=1
python3 -m torch.distributed.run --standalone --nproc_per_node=2 train_gpt.py 2>&1 | python3 -u /tmp/stamp.py > '$OUT'/e2e_w2.log'
OUT=$OUT/b bash bench/on_gpus.sh 540 \
  "python3 bench/ttt_phased_gpu.py --nproc 1 --artifact $art --parts phased,sliding,full --out $OUT/ttt1" \
  "python3 bench/ttt_startup_gpu.py --budget 500 --json $OUT/startup.json" \
  "$e2e"
cp logs/e2e_w2.txt $OUT/ 2>/dev/null
tar czf /tmp/all.tgz -C $OUT . && rm -rf $OUT/* && mv /tmp/all.tgz $OUT/
