#!/usr/bin/env bash
# The main job: train_gpt.py under torchrun with a preset chosen for this machine. The console is teed to
# logs/<RUN_ID>.console.txt and the last line says how the job ended (on a failure: the trainer's reason); the
# terminal is shown the job's output without torchrun's own log lines and failure report (tools/console_filter.py).
# ./run.sh --help lists the recipes, the presets and the variables it reads.
#
# What run.sh relies on from the trainer (today's train_gpt.py does all of it):
# - A failure the trainer can name is printed as one line `error: <reason>`, the failing rank's last (the first
#   such line of the job is the reason; indented lines right after it would continue it). run.sh ends with the
#   failing rank's exit status (2 for a refused configuration).
# - Without such a line, the reason comes from torchrun's "Root Cause" summary (the rank's exit code, the
#   signal that killed it, or the last line of the traceback that @record reports).
# - `logfile:<path>` names the trainer's own log; each run's outputs are logs/<RUN_ID>.* or logs/<RUN_ID>/
#   (run.sh refuses a RUN_ID that has any, unless RESUME continues that run) and logs/<RUN_ID>.console.txt is
#   run.sh's alone.
# - A rank sent SIGINT or SIGTERM (torchrun forwards the signal it gets) exits within torchrun's 30 s grace.
set -euo pipefail
cd "$(dirname "$0")"

usage() {
  cat <<'EOF'
usage: ./run.sh        (settings are environment variables, e.g. NPROC=8 ITERATIONS=100 ./run.sh)

Trains train_gpt.py under torchrun (NPROC processes, default: one per usable NVIDIA GPU, else 1) and tees the
console to logs/<RUN_ID>.console.txt; the trainer's own log is logs/<RUN_ID>.txt.

RECIPE   the trainer's table of defaults; the presets below are scaled from it, and with no dataset named it
         trains on the bundled sample, built once by data/build_shards.py with the recipe's vocabulary:
  2026-03-23  (default) LeakyReLU^2, legal TTT, Parallel Muon; sample: --vocab-size 1024
  2026-04-09  SP8192, depth recurrence, parallel residuals, GPTQ; sample: --vocab-size 8192
  2026-04-27  2026-04-09 plus the documents loader, SmearGate and sparse attention gates, two decoder lanes,
              LQER, the pergroup compressor, phased LoRA TTT; CaseOps sample: --caseops --vocab-size 8192
PRESET   which settings run.sh adds (anything you export wins over the preset):
  auto     (default) tiny without a usable NVIDIA GPU; with GPUs: short on the bundled sample, record when
           DATA_PATH or TOKENIZER_PATH names a dataset
  tiny     the recipe's features on its model scaled down (4-6 blocks of width 64-128), 150 steps: minutes on 2
           CPU cores
  short    the record model for 120 s of training, shorter EMA horizon
  record   nothing added: train_gpt.py's defaults are the record (600 s on 8 GPUs); on a CPU it needs more
           memory than a 24 GB machine has
DATA_PATH, TOKENIZER_PATH   the dataset; with neither set, the recipe's bundled sample (see RECIPE)
NPROC    processes per node (torchrun --nproc_per_node)
RUN_ID   names the logs (default run_<date>_<time>); an id that already has logs is refused, unless RESUME is set
RESUME   latest (RUN_ID's newest checkpoint) or a checkpoint folder: continue the run that wrote it, in its logs
         and with its settings instead of a preset's (CHECKPOINT_EVERY or CHECKPOINT_ON_SIGNAL=1 write
         checkpoints; docs/checkpoint.md)
PYTHON   the interpreter (default: ./.venv or python3, see tools/python_env.sh)

Every trainer setting (an environment variable too), its default and what it does: tools/py train_gpt.py --help
EOF
}

refuse() {  # a bad invocation: nothing has started
  echo "run.sh: $*" >&2
  exit 2
}

if [ $# -gt 0 ]; then
  case $1 in
    -h|--help) usage; exit 0 ;;
    *) refuse "unexpected argument '$1': settings are environment variables, e.g. ITERATIONS=100 ./run.sh (./run.sh --help)" ;;
  esac
fi
PRESET=${PRESET:-auto}
case $PRESET in
  auto|tiny|short|record) ;;
  *) refuse "PRESET=$PRESET: expected auto, tiny, short or record (./run.sh --help)" ;;
esac
if [ -n "${NPROC:-}" ] && ! [[ $NPROC =~ ^[1-9][0-9]*$ ]]; then
  refuse "NPROC=$NPROC: expected a positive whole number of processes per node"
fi
# Each recipe of train_gpt.py's table (a test keeps the two lists equal): its bundled-sample build, the dataset and
# tokenizer that build writes (the recipe's default paths), and the size of its record model.
recipe=${RECIPE:-2026-03-23}
case $recipe in
  2026-03-23) sample_build=(--vocab-size 1024); sample=fineweb10B_sp1024; sample_tokenizer=fineweb_1024_bpe.model
              params=27M ;;
  2026-04-09) sample_build=(--vocab-size 8192); sample=fineweb10B_sp8192; sample_tokenizer=fineweb_8192_bpe.model
              params=36M ;;
  2026-04-27) sample_build=(--caseops --vocab-size 8192); sample=fineweb10B_sp8192_lossless_caps_caseops_v1_reserved
              sample_tokenizer=fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model; params=36M ;;
  *) refuse "RECIPE=$recipe: expected 2026-03-23, 2026-04-09 or 2026-04-27 (./run.sh --help)" ;;
esac
if [[ ${RUN_ID:-} == */* ]]; then
  refuse "RUN_ID=$RUN_ID: expected a name without '/' (it names files under logs/)"
fi
if [ -z "${RESUME:-}" ]; then
  export RUN_ID=${RUN_ID:-run_$(date +%Y%m%d_%H%M%S)}
  for path in "logs/$RUN_ID.txt" "logs/$RUN_ID.console.txt" "logs/$RUN_ID"; do  # not into a first run's log
    if [ -e "$path" ]; then
      refuse "RUN_ID=$RUN_ID: $path already exists (an earlier run's); choose another RUN_ID or move it away" \
             "(RESUME=latest continues that run from its newest checkpoint)"
    fi
  done
fi

source tools/python_env.sh

if [ -n "${RESUME:-}" ]; then  # the run that wrote the checkpoint: its RUN_ID, the folder, its settings
  resumed=$("$PYTHON" tools/resume_settings.py) || refuse "$resumed"
  mapfile -t resumed <<< "$resumed"
  export RUN_ID=${resumed[0]}
fi
console="logs/$RUN_ID.console.txt"

# What torch (the trainer's view) can use: CUDA_VISIBLE_DEVICES, a CPU build of torch, a broken driver all count.
gpu_info=$("$PYTHON" -c '
import os, torch
count = torch.cuda.device_count() if torch.cuda.is_available() else 0
if count:
    print(count, "%d NVIDIA GPU(s) usable by torch %s" % (count, torch.__version__))
elif torch.version.cuda is None:
    print(0, "no usable NVIDIA GPU: torch %s is a CPU build" % torch.__version__)
elif "CUDA_VISIBLE_DEVICES" in os.environ:
    print(0, "no usable NVIDIA GPU: none visible with CUDA_VISIBLE_DEVICES=%r" % os.environ["CUDA_VISIBLE_DEVICES"])
else:
    print(0, "no usable NVIDIA GPU: torch.cuda.is_available() is False")
')
GPUS=${gpu_info%% *}
gpu_note=${gpu_info#* }
if [ "$PRESET" != auto ]; then
  preset=$PRESET; why="PRESET=$PRESET; $gpu_note"
elif [ "$GPUS" -eq 0 ]; then
  preset=tiny; why=$gpu_note
elif [ -z "${DATA_PATH:-}${TOKENIZER_PATH:-}" ]; then
  preset=short; why="$gpu_note; no DATA_PATH/TOKENIZER_PATH: the bundled sample"
else
  preset=record; why="$gpu_note; the dataset of DATA_PATH/TOKENIZER_PATH"
fi
NPROC=${NPROC:-$(( GPUS > 0 ? GPUS : 1 ))}

# Short runs use a shorter EMA horizon: the record's 0.997 averages over ~330 steps, so after 150-200 steps the
# averaged weights would still be half initialisation. The later recipes' presets scale the recipe's own model
# (loops, parallel residuals or two lanes) and keep its warmdown by fraction.
case $recipe:$preset in
  2026-03-23:tiny)  # ~1M parameters, a few minutes on 2 cores
    preset_settings=(NUM_LAYERS=4 MODEL_DIM=128 NUM_HEADS=4 NUM_KV_HEADS=2 XSA_LAST_N=2 VE_LAYERS=2,3 VE_DIM=32
                     BIGRAM_VOCAB_SIZE=512 BIGRAM_DIM=32 TRAIN_SEQ_LEN=256 EVAL_SEQ_LEN=256 TRAIN_BATCH_TOKENS=16384
                     VAL_BATCH_SIZE=16384 ITERATIONS=150 WARMDOWN_ITERS=50 WARMUP_STEPS=2 MAX_WALLCLOCK_SECONDS=0
                     VAL_LOSS_EVERY=75 TRAIN_LOG_EVERY=15 EMA_DECAY=0.95) ;;
  2026-04-09:tiny)  # 6 blocks of width 64 (the 8192-token embedding is most of the model), blocks 2-3 looped,
    # parallel residuals from block 4; 4096 tokens a step
    preset_settings=(NUM_LAYERS=6 MODEL_DIM=64 NUM_HEADS=4 NUM_KV_HEADS=2 ROPE_DIMS=8 XSA_LAST_N=6 LOOP_START=2
                     LOOP_END=3 PARALLEL_RESIDUAL_START=4 TRAIN_SEQ_LEN=256 EVAL_SEQ_LEN=256 TRAIN_BATCH_TOKENS=4096
                     VAL_BATCH_SIZE=16384 ITERATIONS=150 WARMUP_STEPS=2 MAX_WALLCLOCK_SECONDS=0 VAL_LOSS_EVERY=75
                     TRAIN_LOG_EVERY=15 EMA_DECAY=0.95 GPTQ_CALIBRATION_BATCHES=8) ;;
  2026-04-27:tiny)  # 2026-04-09's tiny blocks, two lanes from block 4 instead of parallel residuals, both gates.
    # Packed rows of 512 tokens in training and in the evals that pack documents (VAL_BATCH_SIZE, EVAL_BATCH_SEQS): a
    # CPU's document attention is SDPA with a dense (row x row) mask. The phased LoRA TTT scaled to the sample's 200 val
    # documents: rank 8, batches of 16, three global SGD phases over the first 2, 4 and 8 documents scored (the record:
    # up to 5%). As the recipe, no validation before the end.
    preset_settings=(NUM_LAYERS=6 MODEL_DIM=64 NUM_HEADS=4 NUM_KV_HEADS=2 ROPE_DIMS=8 XSA_LAST_N=6 LOOP_START=2
                     LOOP_END=3 PARALLEL_START_LAYER=4 TRAIN_SEQ_LEN=256 EVAL_SEQ_LEN=256 TRAIN_BATCH_TOKENS=4096
                     VAL_BATCH_SIZE=4096 EVAL_BATCH_SEQS=2 ITERATIONS=150 WARMUP_STEPS=2 MAX_WALLCLOCK_SECONDS=0
                     TRAIN_LOG_EVERY=15 EMA_DECAY=0.95 GPTQ_CALIBRATION_BATCHES=8 TTT_LORA_RANK=8 TTT_LORA_CHUNK=128
                     TTT_DOC_BATCH=16 TTT_PHASE_DOCS=2,4,8 TTT_CHUNK_TOKENS=1024) ;;
  2026-03-23:short)  # the record model for a short wallclock
    preset_settings=(MAX_WALLCLOCK_SECONDS=120 WARMDOWN_ITERS=60 VAL_LOSS_EVERY=100 TRAIN_LOG_EVERY=25
                     EMA_DECAY=0.97) ;;
  *:short)
    preset_settings=(MAX_WALLCLOCK_SECONDS=120 VAL_LOSS_EVERY=100 TRAIN_LOG_EVERY=25 EMA_DECAY=0.97) ;;
  *:record)
    preset_settings=() ;;
esac
if [ -n "${RESUME:-}" ]; then  # a resume trains as the slice before it did, whatever preset this machine would get
  preset_settings=("${resumed[@]:2}")
  why="$preset's settings replaced by those of the run that wrote ${resumed[1]}; $gpu_note"
  preset=resume
fi
# grep reads all its input (not -q: under pipefail, -q's exit at the first match can kill printf by SIGPIPE and so
# fail the pipeline at random: a resume would then build the bundled sample it does not use)
if [ -z "${DATA_PATH:-}" ] && [ -z "${TOKENIZER_PATH:-}" ] \
    && ! printf '%s\n' "${preset_settings[@]}" | grep '^\(DATA\|TOKENIZER\)_PATH=' >/dev/null; then
  if ! ls "data/datasets/$sample"/fineweb_val_*.bin >/dev/null 2>&1 || [ ! -f "data/tokenizers/$sample_tokenizer" ]
  then
    echo "+ $PYTHON data/build_shards.py ${sample_build[*]}   # no dataset configured: building the bundled sample"
    "$PYTHON" data/build_shards.py "${sample_build[@]}"
  fi
fi
settings=()
kept=()
for kv in "${preset_settings[@]}"; do  # the preset never overrides what the caller set
  name=${kv%%=*}
  if [ -z "${!name:-}" ]; then
    export "$kv"
    settings+=("$kv")
  else
    kept+=("$name=${!name}")
  fi
done

mkdir -p logs
say() {  # to the terminal and the console log; a closed terminal (SIGHUP) must not stop run.sh
  printf '%s\n' "$*" | tee -a "$console" || true
}
say "preset: $preset ($why)${kept[*]:+; kept from the environment: ${kept[*]}}"
if [ "$GPUS" -eq 0 ] && { [ "$preset" = short ] || [ "$preset" = record ]; }; then
  say "run.sh: WARNING: PRESET=$preset trains the $params-parameter record model on the CPU: it needs more memory" \
      "than a 24 GB machine has (killed by the kernel there) and hours per run; PRESET=tiny is the CPU preset"
fi
cmd=("$PYTHON" -m torch.distributed.run --standalone --nproc_per_node="$NPROC" train_gpt.py)
say "+ RUN_ID=$RUN_ID ${RESUME:+RESUME=$RESUME }${settings[*]} ${cmd[*]}"

stop_signal=""
job=""
forwarded() {  # what the job gets for run.sh's signal $1: Ctrl-C stays SIGINT (the trainer logs which it got)
  if [ "$1" = INT ]; then echo INT; else echo TERM; fi
}
on_signal() {
  if [ -z "$stop_signal" ]; then
    stop_signal=$1
    say "run.sh: SIG$1: stopping the job (torchrun sends SIG$(forwarded "$1") to every rank, SIGKILL after 30 s;" \
        "the same signal again kills the job at once)"
    if [ -n "$job" ]; then kill -s "$(forwarded "$1")" "$job" 2>/dev/null || true; fi
  elif [ -n "$job" ]; then
    say "run.sh: SIG$1 again: killing the job"
    local rank
    for rank in $(pgrep -P "$job" 2>/dev/null); do  # torchrun starts each rank in its own process group
      kill -KILL -- "-$rank" 2>/dev/null || kill -KILL "$rank" 2>/dev/null || true
    done
    kill -KILL -- "-$job" 2>/dev/null || true
  fi
}
trap 'on_signal INT' INT
trap 'on_signal TERM' TERM
trap 'on_signal HUP' HUP

# The job writes into a FIFO read by tee, so that run.sh knows torchrun's pid (to stop it) and the reader's (to read
# the complete console log before the last line). tee writes every line to the console log and passes them to the
# terminal through the filter; both ignore Ctrl-C and hangups, and tee -p keeps writing the log if the filter's
# terminal goes away: they end when the job's output does, and the console log is complete.
tmp=$(mktemp -d)
mkfifo "$tmp/output"
( trap '' INT HUP; tee -p -a "$console" | "$PYTHON" tools/console_filter.py ) < "$tmp/output" &
tee_pid=$!
# The job gets its own process group: a terminal's Ctrl-C reaches run.sh alone, which stops the job once.
set -m
"${cmd[@]}" < /dev/null > "$tmp/output" 2>&1 &
job=$!
set +m
if [ -n "$stop_signal" ]; then  # a signal came while the job was starting
  kill -s "$(forwarded "$stop_signal")" "$job" 2>/dev/null || true
fi

while kill -0 "$job" 2>/dev/null; do  # a trapped signal interrupts wait: wait again until the job has ended
  wait "$job" || true
done
status=0
wait "$job" || status=$?
wait "$tee_pid" || true
rm -rf "$tmp"

if [ -n "$stop_signal" ]; then
  say "run.sh: stopped by SIG$stop_signal (torchrun exit $status); the output is in $console"
  trap - "$stop_signal"
  kill -s "$stop_signal" $$  # the conventional status: killed by that signal (128 + its number in a shell)
  exit $(( 128 + $(kill -l "$stop_signal") ))
fi
outcome=$("$PYTHON" tools/job_outcome.py "$console" "$status" "$SECONDS")
code=${outcome%%$'\n'*}
if [ "$code" -eq 2 ] && [ ! -e "logs/$RUN_ID.txt" ] && [ ! -e "logs/$RUN_ID" ]; then
  rm -f "$console"  # refused before any work: the corrected run may use the same RUN_ID
  echo "${outcome#*$'\n'} (nothing started; $console removed, RUN_ID=$RUN_ID is free)" >&2
  exit 2
fi
if [ "$code" -eq 0 ]; then
  say "${outcome#*$'\n'}"
else
  say "${outcome#*$'\n'}" >&2
fi
exit "$code"
