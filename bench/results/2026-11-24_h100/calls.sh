# call 1
#!/bin/bash
# GPU call A: step time before/after (issues 18, 20), shuffled loader data_wait (21), loader checks (21).
set -u
nvidia-smi --query-compute-apps=pid --format=csv,noheader
nvidia-smi --query-gpu=name,power.limit --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export DATA_PATH=$PWD/.carry/wiki1024 TOKENIZER_PATH=$PWD/.carry/sp1024.model
mkdir -p $OUT; T0=$SECONDS
echo "=== step_time old vs new (record config)"
timeout 340 python3 bench/step_time.py --script .carry/old_train_gpt_913790e.py --script train_gpt.py --steps 80 \
  --loss-at 50 80 --timeout 165 --config record: --out-dir $OUT/step_time 2>&1 | tail -5
echo "=== step_time new, TRAIN_LOADER=shuffled  (t=$((SECONDS-T0))s)"
timeout 170 python3 bench/step_time.py --script train_gpt.py --steps 80 --loss-at 50 80 --timeout 165 \
  --config shuffled:TRAIN_LOADER=shuffled --out-dir $OUT/step_time 2>&1 | tail -3
echo "=== gpu_loader_check (t=$((SECONDS-T0))s)"
(cd bench && timeout 60 python3 gpu_loader_check.py --module ../train_gpt.py --steps 48) 2>&1 | tail -30
echo "=== loader_throughput (t=$((SECONDS-T0))s)"
(cd bench && timeout 60 python3 loader_throughput.py --module ../train_gpt.py --data-dir /tmp/lt --shard-tokens 30000000 --shards 4 --workers 2,4) 2>&1 | tail -25
echo "=== end t=$((SECONDS-T0))s"
# call 2
#!/bin/bash
# GPU call A2: step time new vs old at the record config (issues 18, 20), separate invocations; loader throughput (21).
set -u
nvidia-smi --query-compute-apps=pid --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export DATA_PATH=$PWD/.carry/wiki1024 TOKENIZER_PATH=$PWD/.carry/sp1024.model
mkdir -p $OUT; T0=$SECONDS
for s in train_gpt.py .carry/old_train_gpt_913790e.py; do
  echo "=== step_time $s record (t=$((SECONDS-T0))s)"
  timeout 250 python3 bench/step_time.py --script $s --steps 80 --loss-at 50 80 --timeout 240 --config record: \
    --out-dir $OUT/step_time 2>&1 | tail -2
done
echo "=== loader_throughput (t=$((SECONDS-T0))s)"
(cd bench && timeout 75 python3 loader_throughput.py --module ../train_gpt.py --data-dir /tmp/lt --shard-tokens 20000000 --shards 8 --workers 2,4) 2>&1 | tail -25
echo "=== end t=$((SECONDS-T0))s"
# call 3
#!/bin/bash
# GPU call B: the PACKED trainer at the record config for 290 s (TTT off): kernels from the packed file, byte lines,
# the artifact back for the lzma/brotli table (issue 19.2), and bench/eval_dtype.py on its final_model.pt (18.7).
set -u
nvidia-smi --query-compute-apps=pid --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
export DATA_PATH=$PWD/.carry/wiki1024 TOKENIZER_PATH=$PWD/.carry/sp1024.model PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
timeout 470 env RUN_ID=b290 MAX_WALLCLOCK_SECONDS=290 TTT_ENABLED=0 python3 -m torch.distributed.run --standalone \
  --nproc_per_node=1 .carry/packed/train_gpt.py > $OUT/b290_console.txt 2>&1
echo "trainer rc=$? t=$((SECONDS-T0))s"
grep -E "^(code_bytes|attention_backend|qk_kernel|mlp_kernel|kernels|step:[0-9]+/[0-9]+ val|stopping|peak|Code size|Serialized|Total|submission_bytes|final_int6|outputs|swa|ema|late_qat)" $OUT/b290_console.txt | cut -c1-220
cp logs/b290.txt $OUT/b290_log.txt; cp logs/b290/final_model.int6.ptz $OUT/ 
echo "=== eval_dtype (t=$((SECONDS-T0))s)"
timeout $((570-(SECONDS-T0))) python3 bench/eval_dtype.py --model logs/b290/final_model.pt --max-windows 6144 2>&1 | tail -12
echo "=== end t=$((SECONDS-T0))s"
# call 5 (call 4: the same with 200 s, EMA off, WARMDOWN_ITERS=120, cut by its timeout)
#!/bin/bash
# GPU call B: the PACKED trainer at the record config for 290 s (TTT off): kernels from the packed file, byte lines,
# the artifact back for the lzma/brotli table (issue 19.2), and bench/eval_dtype.py on its final_model.pt (18.7).
set -u
nvidia-smi --query-compute-apps=pid --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
export DATA_PATH=$PWD/.carry/wiki1024 TOKENIZER_PATH=$PWD/.carry/sp1024.model PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
timeout 400 env RUN_ID=b180 MAX_WALLCLOCK_SECONDS=180 TTT_ENABLED=0 EMA_ENABLED=0 python3 -m torch.distributed.run --standalone \
  --nproc_per_node=1 .carry/packed/train_gpt.py > $OUT/b180_console.txt 2>&1
echo "trainer rc=$? t=$((SECONDS-T0))s"
grep -E "^(code_bytes|attention_backend|qk_kernel|mlp_kernel|kernels|step:[0-9]+/[0-9]+ val|stopping|peak|Code size|Serialized|Total|submission_bytes|final_int6|outputs|swa|ema|late_qat)" $OUT/b180_console.txt | cut -c1-220
cp logs/b180.txt $OUT/b180_log.txt; cp logs/b180/final_model.int6.ptz $OUT/ 
echo "=== eval_dtype (t=$((SECONDS-T0))s)"
timeout $((520-(SECONDS-T0))) python3 bench/eval_dtype.py --model logs/b180/final_model.pt --max-windows 4096 2>&1 | tail -12
echo "=== end t=$((SECONDS-T0))s"
# call 6
#!/bin/bash
# GPU call D: the record folder's two seeds (issue 19.4): the PACKED trainer, record configuration, 60 s each.
set -u
nvidia-smi --query-compute-apps=pid --format=csv,noheader
python3 -m pip install -q --no-index --no-deps --upgrade --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
export DATA_PATH=$PWD/.carry/wiki1024 TOKENIZER_PATH=$PWD/.carry/sp1024.model PYTHONUNBUFFERED=1
mkdir -p $OUT; T0=$SECONDS
for seed in 1337 42; do
  timeout 285 env RUN_ID=seed$seed SEED=$seed MAX_WALLCLOCK_SECONDS=60 WARMDOWN_ITERS=40 TRAIN_LOG_EVERY=10 VAL_LOSS_EVERY=0 \
    python3 -m torch.distributed.run --standalone --nproc_per_node=1 .carry/packed/train_gpt.py > $OUT/console_$seed.txt 2>&1
  echo "seed $seed rc=$? t=$((SECONDS-T0))s"; cp logs/seed$seed.txt $OUT/train_seed$seed.log
  grep -E "^(stopping|timing_|Total submission|final_int6_sliding_window_exact|legal_ttt_exact|outputs)" logs/seed$seed.txt
done
cp logs/seed1337/final_model.int6.ptz $OUT/ 2>/dev/null
echo "=== end t=$((SECONDS-T0))s"
