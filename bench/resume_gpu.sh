#!/usr/bin/env bash
# Checkpoint + exact resume on a GPU, ONE call on 1 GPU, under ~9 minutes: RECIPE=2026-04-09 (compiled),
# ITERATIONS=300 of TRAIN_BATCH_TOKENS=65536, no wallclock cap (the schedule is by steps, the same in every run),
# looping on at step 105. Three runs start together on the GPU: `straight_a` and `straight_b` (uninterrupted: their
# difference is the run-to-run noise) and `stopped`, which gets SIGTERM once it logged step 150
# (CHECKPOINT_ON_SIGNAL=1: it saves a checkpoint at the end of the step it is in and exits 143), then is resumed with
# RESUME=latest and runs to step 300 and through the end of run (GPTQ, round trip, sliding window at stride 64; TTT
# off to save time). Prints the train-loss curves side by side (every 10 steps), the largest |difference| of each
# pair, and the resumed run's resume/stopped/checkpoint lines and final bytes and bpb lines.
# Data: DATA_PATH, TOKENIZER_PATH (default .carry/wiki8192 and .carry/sp8192.model). Logs under $OUT.
#   bash bench/resume_gpu.sh
set -uo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
DEADLINE=${DEADLINE:-530}
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/resume_gpu}
STOP_AT=${STOP_AT:-150}
mkdir -p "$OUT"
export RECIPE=2026-04-09 DATA_PATH=${DATA_PATH:-.carry/wiki8192} TOKENIZER_PATH=${TOKENIZER_PATH:-.carry/sp8192.model}
export PYTHONUNBUFFERED=1 ITERATIONS=300 TRAIN_BATCH_TOKENS=65536 MAX_WALLCLOCK_SECONDS=0 WARMUP_STEPS=3 \
  VAL_LOSS_EVERY=0 TRAIN_LOG_EVERY=10 TTT_ENABLED=0 GPTQ_CALIBRATION_BATCHES=16
left() { echo $(( DEADLINE - (SECONDS - started) )); }

preflight=$("$PY" bench/harness.py preflight resume_gpu) || exit 2  # the recipe's codec, the data paths
eval "$preflight"
"$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0))"
tag=$(date +%H%M%S)
run() {  # NAME EXTRA_ENV...: the trainer in the background (RUN_ID NAME_$tag unless set), console in $OUT/NAME.*
  local name=$1; shift
  env RUN_ID=${name}_$tag "$@" timeout --signal=TERM --kill-after=10 $(( $(left) - 5 )) "$PY" train_gpt.py \
    > "$OUT/$name.console.txt" 2>&1 &
}
run straight_a FINAL_EVAL=0; pid_a=$!
run straight_b FINAL_EVAL=0; pid_b=$!
run stopped CHECKPOINT_ON_SIGNAL=1; pid_c=$!
echo "started straight_a, straight_b, stopped (RUN_ID suffix $tag); SIGTERM to stopped after step:$STOP_AT"
until grep -q "^step:$STOP_AT/" "$OUT/stopped.console.txt" 2>/dev/null; do
  kill -0 $pid_c 2>/dev/null || { echo "resume_gpu: the stopped run ended before step $STOP_AT:"; \
    tail -20 "$OUT/stopped.console.txt"; exit 1; }
  sleep 0.5
done
kill -TERM $pid_c
wait $pid_c; echo "stopped: exit $? (143 = SIGTERM, after its checkpoint)"
run resumed RUN_ID=stopped_$tag CHECKPOINT_ON_SIGNAL=1 RESUME=latest; pid_r=$!
wait $pid_a; echo "straight_a: exit $?"
wait $pid_b; echo "straight_b: exit $?"
wait $pid_r; echo "resumed: exit $?"
cp logs/*_$tag.txt "$OUT/" 2>/dev/null
"$PY" - "$OUT" "$tag" "$STOP_AT" <<'EOF'
import re, sys
out, tag, stop_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
curves = {}
for name in ("straight_a", "straight_b", "stopped"):
    text = open("%s/%s_%s.txt" % (out, name, tag)).read()
    curves[name] = {int(s): float(l) for s, l in re.findall(r"^step:(\d+)/\d+ train_loss:([\d.]+)", text, re.M)}
a, b, r = curves["straight_a"], curves["straight_b"], curves["stopped"]
print("%6s %10s %10s %14s %10s %10s" % ("step", "straight_a", "straight_b", "stopped+resumed", "|a-b|", "|a-res|"))
for step in sorted(set(a) | set(b) | set(r)):
    cells = [("%10.4f" % c[step]) if step in c else "%10s" % "-" for c in (a, b)]
    res = ("%14.4f" % r[step]) if step in r else "%14s" % "-"
    diffs = ["%10.4f" % abs(a[step] - other[step]) if step in a and step in other else "%10s" % "-" for other in (b, r)]
    print("%6d %s %s %s %s %s" % (step, cells[0], cells[1], res, diffs[0], diffs[1]))
for label, other, after in (("noise |a-b|", b, 0), ("|a-resumed|", r, 0), ("|a-resumed| after the stop", r, stop_at)):
    common = [s for s in a if s in other and s > after]
    print("max %s over %d logged steps: %.4f" % (label, len(common), max(abs(a[s] - other[s]) for s in common)))
EOF
echo "== the stopped+resumed run's log (RUN_ID stopped_$tag): stop, resume and final lines"
grep -E "^(stopped:|checkpoint:|resume:|layer_loop:|step:300/|ema:|Serialized model|Code size|Total submission|\
submission_bytes|final_int6|DIAGNOSTIC|error)" "$OUT/stopped_$tag.txt"
echo "resume_gpu: done in $(( SECONDS - started )) s; logs in $OUT"
