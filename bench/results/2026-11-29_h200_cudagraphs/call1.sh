#!/usr/bin/env bash
# One H200: the phased TTT's LoRA graph under CUDA graphs (torch.compile mode="reduce-overhead", a
# cudagraph_mark_step_begin() before each step: .carry/train_gpt_cg.py = train_gpt.py at this commit with those two
# lines): a cold ttt_eval (199 documents; empty Inductor and Triton caches) then its cost grid on the warm cache.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1 TORCH_LOGS=recompiles,perf_hints
S=bench/results/2026-11-29_h200_ttt
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
cp .carry/train_gpt_cg.py train_gpt.py  # this copy of the tree only
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_cg TRITON_CACHE_DIR=/tmp/tri_cg timeout -k 5 330 python3 $S/ttt_eval.py 2>&1 \
  | python3 -u .carry/stamp.py > $OUT/whole_cg_cold.log
grep -E "result|ttt_phased:(done|batch)|Error|skipping|cudagraph" $OUT/whole_cg_cold.log | cut -c1-240 | head -30
TORCHINDUCTOR_CACHE_DIR=/tmp/ind_cg TRITON_CACHE_DIR=/tmp/tri_cg timeout -k 5 150 python3 bench/eval_speed.py warmup \
  --budget 130 --repeats 3 --json $OUT/cost_whole_cg.json 2>&1 | python3 -u .carry/stamp.py > $OUT/cost_whole_cg.log
grep -vE "^ *[0-9.]+ +(W|I)[0-9]{4}" $OUT/cost_whole_cg.log | tail -40 | cut -c1-200
grep peak_mib $OUT/cost_whole_cg.json
