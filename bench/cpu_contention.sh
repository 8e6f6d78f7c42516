#!/usr/bin/env bash
# ./run.sh's wall time alone and beside one CPU-bound process (a shell busy loop), for one or more trees:
#   bash bench/cpu_contention.sh [TREE ...]     (default: this repository; e.g. an unpacked `git archive main`)
# Prints one table row per tree x mode: wall seconds, the slowdown beside the busy process, and the 1-minute load
# average when the run started (other jobs on the machine show there). Settings pass through the environment
# (e.g. ITERATIONS=40 for a shorter run); every run uses PRESET=tiny and its own RUN_ID, logs under each tree's logs/.
# The bundled sample is built before the first timed run, so no row includes it.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
trees=("$@")
[ ${#trees[@]} -gt 0 ] || trees=("$here")
source "$here/tools/python_env.sh"  # one interpreter for every tree (an archive has no .venv of its own)
stamp=$(date +%Y%m%d_%H%M%S)
rows=()
for tree in "${trees[@]}"; do
  tree=$(cd "$tree" && pwd)
  if ! ls "$tree"/data/datasets/fineweb10B_sp1024/fineweb_val_*.bin >/dev/null 2>&1; then
    (cd "$tree" && "$PYTHON" data/build_shards.py --vocab-size 1024 >/dev/null)
  fi
  alone=""
  for mode in alone busy; do
    busy_pid=""
    if [ "$mode" = busy ]; then
      bash -c 'while :; do :; done' &
      busy_pid=$!
      sleep 1
    fi
    load=$(cut -d' ' -f1 /proc/loadavg)
    start=$(date +%s.%N)
    status=0
    (cd "$tree" && PRESET=tiny RUN_ID="contention_${stamp}_$mode" PYTHON="$PYTHON" ./run.sh >/dev/null 2>&1) \
      || status=$?
    end=$(date +%s.%N)
    if [ -n "$busy_pid" ]; then kill "$busy_pid"; wait "$busy_pid" 2>/dev/null || true; fi
    wall=$(echo "$end - $start" | bc)
    [ "$mode" = alone ] && alone=$wall
    ratio=$(echo "scale=2; $wall / $alone" | bc)
    rows+=("$(printf '%-40s %-6s %8.1f %7sx %9s %5s' "$(basename "$tree")" "$mode" "$wall" "$ratio" "$load" "$status")")
    echo "${rows[-1]}" >&2
  done
done
printf '%-40s %-6s %8s %8s %9s %5s\n' tree mode wall_s vs_alone load_1min exit
printf '%s\n' "${rows[@]}"
