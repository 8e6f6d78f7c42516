#!/usr/bin/env bash
# One H200: the per-block compile (bench/results/2026-11-29_h200_ttt/per_block_compile.patch) on this commit's
# trainer with CUDA graphs (.carry/train_gpt_perblock_cg.py: its make_lora_nll compiles the block calls and the head
# in mode="reduce-overhead"): a cold ttt_eval (199 documents, empty caches), then its cost grid on the warm cache.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles
export TORCHINDUCTOR_CACHE_DIR=/tmp/ind_pbcg TRITON_CACHE_DIR=/tmp/tri_pbcg
S=bench/results/2026-11-29_h200_ttt
cp .carry/train_gpt_perblock_cg.py train_gpt.py  # this copy of the tree only
timeout -k 5 250 python3 $S/ttt_eval.py 2>&1 | python3 -u .carry/stamp.py > $OUT/perblock_cg_cold.log
grep -E "result|ttt_phased:(start|done|batch)|Error|Traceback" $OUT/perblock_cg_cold.log | cut -c1-220 | head -20
timeout -k 5 150 python3 bench/eval_speed.py warmup --budget 130 --repeats 3 --json $OUT/cost_perblock_cg.json 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/cost_perblock_cg.log
grep -vE "^ *[0-9.]+ +(W|I|V)[0-9]{4}" $OUT/cost_perblock_cg.log | tail -40 | cut -c1-160
grep peak_mib $OUT/cost_perblock_cg.json
