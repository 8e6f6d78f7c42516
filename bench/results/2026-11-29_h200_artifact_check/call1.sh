#!/usr/bin/env bash
# Two H200s. A short trained RECIPE=2026-04-27 artifact (150 eager steps of 131,072 tokens on .carry/wiki_caseops_v200,
# EMA off so the artifact is the trained weights, no compile warm-up steps), copied to $OUT; then on it the phased TTT
# eval (199 documents, phases 3/7/10), compiled, cold caches: GPU 0 the landed trainer (.carry/train_gpt_landed.py:
# one graph of the LoRA forward, reduce-overhead CUDA graphs), GPU 1 this commit's; then on GPU 1 the compiled training
# forward + backward of both trainers (train_graph_check.py), cold caches, compared bit for bit.
set -u
export DATA_PATH=.carry/wiki_caseops_v200 TOKENIZER_PATH=.carry/caseops8192.model TTT_PHASE_DOCS=3,7,10 SEED=42
export COMPRESSOR=lzma PYTHONUNBUFFERED=1
R=bench/results/2026-11-29_h200_artifact_check; S=bench/results/2026-11-29_h200_stepgraphs
T0=$(date +%s); left() { echo $(( 585 - ($(date +%s) - T0) )); }
CUDA_VISIBLE_DEVICES=0 ITERATIONS=150 TORCH_COMPILE=0 EMA_ENABLED=0 WARMUP_STEPS=0 timeout -k 5 330 \
  python3 bench/eval_speed.py evals --nproc 1 --parts none --out $OUT/art 2>&1 | python3 -u .carry/stamp.py | tail -2
A=logs/art_model/final_model.int6.ptz; ls -la $A || exit 1; cp $A $OUT/
grep -E "step:150|final_int6|submission_bytes|serializ" $OUT/art/train.log | cut -c1-200
echo "train done at $(( $(date +%s) - T0 )) s; $(left) s left"
run() {  # GPU, log name, timeout, env..., command...
  local gpu=$1 name=$2 limit=$3; shift 3
  env CUDA_VISIBLE_DEVICES=$gpu TORCHINDUCTOR_CACHE_DIR=/tmp/ind_$name TRITON_CACHE_DIR=/tmp/tri_$name "$@" \
    timeout -k 5 $limit python3 ${CMD[@]} 2>&1 | python3 -u .carry/stamp.py > $OUT/$name.log
}
( CMD=($S/artifact_eval.py); run 0 ttt_landed_cold $(left) TRAINER=.carry/train_gpt_landed.py ARTIFACT=$A ) &
( CMD=($S/artifact_eval.py); run 1 ttt_new_cold 150 ARTIFACT=$A
  CMD=($R/train_graph_check.py); run 1 train_graph_new 110 SAVE=/tmp/tg_new.pt
  CMD=($R/train_graph_check.py); run 1 train_graph_landed $(( $(left) - 10 )) TRAINER=.carry/train_gpt_landed.py SAVE=/tmp/tg_landed.pt
  python3 $R/train_graph_check.py compare /tmp/tg_landed.pt /tmp/tg_new.pt > $OUT/train_graph_compare.txt 2>&1 ) &
wait
cd $OUT && grep -E "result|ttt_phased:(start|done)|loss|equals|kernels|Error|Traceback" ttt_*.log train_graph_*.log \
  | cut -c1-220; cat train_graph_compare.txt
