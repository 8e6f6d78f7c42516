#!/usr/bin/env bash
# The main job. With DATA_PATH/TOKENIZER_PATH unset it builds the bundled Wikipedia sample (once) and trains a
# preset sized for this machine: CPU -> a tiny model that finishes in a few minutes; GPU -> the record model for
# a short wallclock. With DATA_PATH and TOKENIZER_PATH set it runs the real thing (train_gpt.py's defaults are
# the record). Every setting can be overridden by env, e.g. NPROC=8 ITERATIONS=100 ./run.sh
set -euo pipefail
cd "$(dirname "$0")"
source tools/python_env.sh

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  GPUS=$(nvidia-smi -L | grep -c '^GPU')
else
  GPUS=0
fi
NPROC=${NPROC:-$(( GPUS > 0 ? GPUS : 1 ))}
export RUN_ID=${RUN_ID:-run_$(date +%Y%m%d_%H%M%S)}
preset=()
if [ -z "${DATA_PATH:-}" ] && [ -z "${TOKENIZER_PATH:-}" ]; then
  if ! ls data/datasets/fineweb10B_sp1024/fineweb_val_*.bin >/dev/null 2>&1 \
      || [ ! -f data/tokenizers/fineweb_1024_bpe.model ]; then
    echo "+ $PYTHON data/build_shards.py   # no dataset configured: building the bundled sample"
    "$PYTHON" data/build_shards.py
  fi
  # Short runs use a shorter EMA horizon: the record's 0.997 averages over ~330 steps, so after 150-200 steps
  # the averaged weights would still be half initialisation.
  if [ "$GPUS" -eq 0 ]; then  # tiny CPU preset: ~1M parameters, a few minutes on 2 cores
    preset=(NUM_LAYERS=4 MODEL_DIM=128 NUM_HEADS=4 NUM_KV_HEADS=2 XSA_LAST_N=2 VE_LAYERS=2,3 VE_DIM=32
            BIGRAM_VOCAB_SIZE=512 BIGRAM_DIM=32 TRAIN_SEQ_LEN=256 EVAL_SEQ_LEN=256 TRAIN_BATCH_TOKENS=16384
            VAL_BATCH_SIZE=16384 ITERATIONS=150 WARMDOWN_ITERS=50 WARMUP_STEPS=2 MAX_WALLCLOCK_SECONDS=0
            VAL_LOSS_EVERY=75 TRAIN_LOG_EVERY=15 EMA_DECAY=0.95)
  else  # the record model on the sample for a short wallclock
    preset=(MAX_WALLCLOCK_SECONDS=120 WARMDOWN_ITERS=60 VAL_LOSS_EVERY=100 TRAIN_LOG_EVERY=25 EMA_DECAY=0.97)
  fi
fi
settings=()
for kv in "${preset[@]}"; do  # the preset never overrides what the caller set
  name=${kv%%=*}
  if [ -z "${!name:-}" ]; then export "$kv"; settings+=("$kv"); fi
done
cmd=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" train_gpt.py)
mkdir -p logs
echo "+ RUN_ID=$RUN_ID ${settings[*]} ${cmd[*]}" | tee "logs/$RUN_ID.console.txt"
"${cmd[@]}" 2>&1 | tee -a "logs/$RUN_ID.console.txt"
