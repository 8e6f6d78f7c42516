#!/usr/bin/env bash
# The record reproduction (issue 8) on a device machine, where one command may run 10 minutes but one seed needs
# about 12 (compile + 600 s of training + the end-of-run evals):
#   bash bench/record_seeds.sh start 1337 42 2025   # returns at once; the seeds run one after another, detached
#   bash bench/record_seeds.sh wait [SECONDS]        # waits (default 570) and copies what finished to $OUT
# `start` runs exactly `torchrun --standalone --nproc_per_node=$NPROC train_gpt.py` with SEED and RUN_ID set
# (the record config is the trainer's defaults). DATA_PATH / TOKENIZER_PATH default to the carried Wikipedia
# shards (.carry/wiki, .carry/sp1024.model); NPROC to the number of GPUs. File logs land in logs/record_seed<N>.txt;
# `wait` copies them, the console logs and a status file to $OUT. Then, here:
#   python3 -m records.make make --name ... --author ... --github-id ... <the copied record_seed*.txt>
set -euo pipefail
cd "$(dirname "$0")/.."
state=/tmp/record_seeds
case "${1:-}" in
  start)
    shift
    [ $# -gt 0 ] || { echo "usage: $0 start SEED [SEED...]" >&2; exit 2; }
    [ ! -e "$state/running" ] || { echo "$0: a run is already going (see $state)" >&2; exit 2; }
    mkdir -p "$state" logs
    nproc=${NPROC:-$(nvidia-smi -L | grep -c '^GPU')}
    export DATA_PATH=${DATA_PATH:-.carry/wiki} TOKENIZER_PATH=${TOKENIZER_PATH:-.carry/sp1024.model}
    cat > "$state/run.sh" <<INNER
set -u
for seed in $*; do
  SEED=\$seed RUN_ID=record_seed\$seed python3 -m torch.distributed.run --standalone --nproc_per_node=$nproc \\
      train_gpt.py > logs/record_seed\$seed.console.txt 2>&1
  echo "seed \$seed exit \$? at \$(date -u +%H:%M:%S)" >> "$state/status"
done
rm -f "$state/running"
INNER
    touch "$state/running"
    echo "started at $(date -u +%H:%M:%S): seeds $* on $nproc process(es)" > "$state/status"
    setsid nohup bash "$state/run.sh" > "$state/driver.log" 2>&1 < /dev/null &
    cat "$state/status"
    ;;
  wait)
    limit=${2:-570}
    waited=0
    while [ -e "$state/running" ] && [ "$waited" -lt "$limit" ]; do sleep 5; waited=$((waited + 5)); done
    out=${OUT:?wait copies to \$OUT}
    cp "$state/status" "$out/record_status.txt"
    for f in logs/record_seed*.txt; do [ -e "$f" ] && cp "$f" "$out/"; done
    cat "$state/status"
    [ ! -e "$state/running" ] || echo "still running after ${limit} s: call wait again"
    ;;
  *)
    echo "usage: $0 start SEED [SEED...] | wait [SECONDS]" >&2; exit 2 ;;
esac
