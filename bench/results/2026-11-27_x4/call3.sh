#!/usr/bin/env bash
# The third device call of 2026-11-27 (the second, rerun at once on the warm machine: its Inductor cache filled),
# 4 GPUs of one host, from the repo root; everything lands in $OUT/all.tgz.
#   A (side by side, 290 s): gpu0-2 issue 30's compare rows at the record's per-GPU micro-batch (TRAIN_BATCH_TOKENS
#     786,432 on one GPU = 8 micro-steps of 98,304 tokens, as each of the record's 8 GPUs does), one config per GPU;
#     gpu3 a RECIPE=2026-04-27 run (200 steps x 131,072 tokens, TTT off, COMPRESSOR=pergroup) to the end of its
#     evaluation, then bench/pergroup.py on its artifact on that GPU.
#   B (4 GPUs, 270 s): issue 31's evals of that artifact at world size 4 (phased LoRA TTT, sliding, full TTT).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH DATA_PATH=.carry/wiki_caseops TOKENIZER_PATH=.carry/caseops8192.model
row() { echo "python3 bench/recipe_0427_gpu.py --configs $1 --batch-tokens 786432 --steps 80 --budget 270 --out-dir \$OUT/cmp_$1"; }
full='export RECIPE=2026-04-27 ITERATIONS=200 TRAIN_BATCH_TOKENS=131072 MAX_WALLCLOCK_SECONDS=0 RUN_ID=full0427b TTT_ENABLED=0
python3 -m torch.distributed.run --standalone --nproc_per_node=1 train_gpt.py >$OUT/full0427b.txt 2>&1
cp logs/full0427b/final_model.int6.ptz $OUT/full0427b.ptz
python3 bench/pergroup.py logs/full0427b/final_model.int6.ptz --no-lrzip --no-brotli --json $OUT/pergroup_gpu.json'
OUT=$OUT/a bash bench/on_gpus.sh 290 "$(row 0409)" "$(row 0427)" "$(row 0427_dense)" "$full"
for label in 0409 0427 0427_dense; do tail -n 3 $OUT/a/cmp_$label/*.stamped; done
timeout -k 10 270 python3 bench/ttt_phased_gpu.py --nproc 4 --artifact logs/full0427b/final_model.int6.ptz \
  --parts phased,sliding,full --out $OUT/ttt4
tar czf $OUT/all.tgz -C $OUT a ttt4 && rm -rf $OUT/a $OUT/ttt4
