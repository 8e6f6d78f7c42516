#!/usr/bin/env bash
# One device call, several benchmarks side by side: command i runs on GPU i alone (CUDA_VISIBLE_DEVICES=i), each
# under `timeout SECONDS`, its output in $OUT/gpu<i>.txt (./logs/on_gpus/ without $OUT); when all are done, each
# output's last lines are printed. Leftover train_gpt.py processes on the GPUs are killed once, first
# (LEFTOVERS_KILLED=1 tells bench/recipe_0427_gpu.py not to: it would kill its neighbours); brotli, constriction and
# py-spy come from the carried .whl/ wheels where the image lacks them (as in bench/gpu_preflight.sh, which also
# checks DATA_PATH: the commands here may need none).
#
#   bash bench/on_gpus.sh 540 "python3 bench/recipe_0427_gpu.py" "python3 bench/ttt_phased_gpu.py"
#
# Runs side by side share the host's CPUs and disk: a step time measured beside others is compared only with rows
# of the same command (same GPU, same neighbours), never across GPUs.
set -u
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: bash bench/on_gpus.sh SECONDS COMMAND [COMMAND ...] (command i on GPU i)" >&2
  exit 2
fi
seconds=$1
shift
gpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
if [ "$#" -gt "$gpus" ]; then
  echo "on_gpus: $# commands but $gpus GPU(s)" >&2
  exit 2
fi
PY=${PY:-python3}
if ! "$PY" -c "import brotli, constriction" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 2
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH} PATH=/tmp/site/bin:$PATH
fi
for pid in $(nvidia-smi --query-compute-apps=pid --format=csv,noheader); do
  if grep -q train_gpt.py "/proc/$pid/cmdline" 2>/dev/null; then
    echo "on_gpus: killing leftover trainer pid $pid"
    kill -9 "$pid"
  fi
done
export LEFTOVERS_KILLED=1
# torchrun sets OMP_NUM_THREADS=1 only for several processes; N single-GPU runs would each take every core
# (suspected in the 78 s start-ups of bench/NOTES.md's 2026-11-27 round): each gets its share unless set
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / $# > 0 ? $(nproc) / $# : 1 ))}
out=${OUT:-logs/on_gpus}
mkdir -p "$out"
index=0
for command in "$@"; do
  echo "== gpu$index: $command"
  CUDA_VISIBLE_DEVICES=$index timeout -k 20 "$seconds" bash -c "$command" >"$out/gpu$index.txt" 2>&1 &
  index=$((index + 1))
done
status=0
for job in $(jobs -p); do
  wait "$job" || status=1
done
index=0
for command in "$@"; do
  echo
  echo "==== gpu$index: $command (full output: $out/gpu$index.txt)"
  tail -n 40 "$out/gpu$index.txt"
  index=$((index + 1))
done
exit $status
