"""Step time of training scripts side by side: one table of step_avg, tokens/s, MFU, peak memory, data wait, the
last validation bpb and train losses at chosen steps.

Any script that follows the challenge's conventions works (env-var settings, `step:N/M train_loss:... step_avg:...`
and `step:N/M val_loss:... val_bpb:...` lines, `peak memory allocated: N MiB`), e.g. an older commit of our
train_gpt.py or the record's own script.
Each (script, config) pair runs under `torchrun --standalone --nproc_per_node=N`; the run is stopped as soon as
it prints its peak-memory line, so end-of-run evals do not cost time. Everything runs in this one invocation,
so before/after numbers come from the same machine state.

  git show HEAD~5:train_gpt.py > /tmp/old_train_gpt.py
  python bench/step_time.py --script /tmp/old_train_gpt.py --script train_gpt.py --steps 120 \\
      --config record: --config no_prefetch:TRAIN_PREFETCH=0,TRAIN_COPY_STREAM=0

A config is LABEL:KEY=VALUE,KEY=VALUE (empty after the colon: the script's defaults). DATA_PATH, TOKENIZER_PATH
and other settings come from the environment. MFU counts the model FLOPs of a training step (forward + backward
= 3x forward: the matmuls of every layer, the tied head, the bigram/VE projections, and causal attention) against
--peak-tflops (H100 SXM dense bf16: 989); it is the 2026-03-23 architecture's count, so n/a for another RECIPE.
--window A:B adds the mean step time between logged steps A and B (B empty: the last logged step), e.g. before
and after depth recurrence switches on (the loop@ column: the step of the `layer_loop:enabled` line). --budget
caps the whole invocation: a run still going at the budget is stopped and reported with the steps it logged.

  python bench/step_time.py --steps 200 --loss-at 50 100 150 200 --window 10:70 --window 80: \
      --config fused:RECIPE=2026-04-09 --config torch:RECIPE=2026-04-09,QK_KERNEL=torch,MLP_KERNEL=torch
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORD_SHAPE = dict(NUM_LAYERS=11, MODEL_DIM=512, NUM_HEADS=8, NUM_KV_HEADS=4, MLP_MULT=3.0, VOCAB_SIZE=1024,
                    TRAIN_SEQ_LEN=2048, TRAIN_BATCH_TOKENS=786432, BIGRAM_DIM=128, VE_DIM=128, VE_LAYERS="9,10")
STEP_LINE = re.compile(r"^step:(\d+)/\d+ train_loss:([\d.]+) train_time:(\d+)ms step_avg:([\d.]+)ms")
PEAK_LINE = re.compile(r"^peak memory allocated: (\d+) MiB")
WAIT_LINE = re.compile(r"^data_wait total_ms:[\d.]+ per_step_ms:([\d.]+)")
VAL_LINE = re.compile(r"^step:(\d+)/\d+ val_loss:[\d.]+ val_bpb:([\d.]+)")
LOOP_LINE = re.compile(r"^layer_loop:enabled step:(\d+)")


def step_flops(env: dict) -> float:
    """Model FLOPs of one optimizer step (forward + backward) for the record architecture at `env`'s shape."""
    get = lambda name: type(RECORD_SHAPE[name])(env.get(name, RECORD_SHAPE[name]))  # noqa: E731
    layers, dim, heads, kv_heads = get("NUM_LAYERS"), get("MODEL_DIM"), get("NUM_HEADS"), get("NUM_KV_HEADS")
    kv_dim = kv_heads * dim // heads
    hidden = int(get("MLP_MULT") * dim)
    per_layer = 2 * dim * dim + 2 * kv_dim * dim + 2 * hidden * dim  # q, o, k, v, up, down weights
    ve_layers = len([part for part in get("VE_LAYERS").split(",") if part.strip()])
    matmul_weights = layers * per_layer + get("VOCAB_SIZE") * dim + get("BIGRAM_DIM") * dim
    matmul_weights += (get("VE_DIM") * kv_dim) if ve_layers else 0
    seq_len = get("TRAIN_SEQ_LEN")
    attention_per_token = layers * 2 * seq_len * dim  # QK^T and AV, causal (half of 2*2*T*d)
    forward_per_token = 2 * matmul_weights + attention_per_token
    return 3.0 * forward_per_token * get("TRAIN_BATCH_TOKENS")


def stop_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:  # already gone
        pass


def run_training(script: Path, env: dict, nproc: int, log_path: Path, timeout: float) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % nproc,
               str(script)]
    result = {"step_avg": None, "steps": 0, "peak_mib": None, "wait_ms": None, "loss": {}, "val_bpb": None,
              "train_ms": {}, "loop_step": None}
    started = time.perf_counter()  # <log>.stamped: each line after the seconds since the launch (where a run stalls)
    with open(log_path, "w") as log, open(log_path.with_suffix(".stamped"), "w") as stamped, subprocess.Popen(
            command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True) as process:
        stop = threading.Timer(max(timeout, 0.0), stop_group, (process.pid,))  # also while it prints nothing
        stop.start()
        for line in process.stdout:
            log.write(line)
            stamped.write("%8.1f %s" % (time.perf_counter() - started, line))
            stamped.flush()
            step = STEP_LINE.match(line)
            if step:
                result["steps"], result["step_avg"] = int(step.group(1)), float(step.group(4))
                result["loss"][int(step.group(1))] = step.group(2)
                result["train_ms"][int(step.group(1))] = float(step.group(3))
            loop = LOOP_LINE.match(line)
            if loop:
                result["loop_step"] = int(loop.group(1))
            val = VAL_LINE.match(line)
            if val:  # the last one (the end of training: every script validates at its final step)
                result["val_bpb"] = "%s@%s" % (val.group(2), val.group(1))
            wait = WAIT_LINE.match(line)
            if wait:
                result["wait_ms"] = float(wait.group(1))
            peak = PEAK_LINE.match(line)
            if peak:
                result["peak_mib"] = int(peak.group(1))
                stop_group(process.pid)  # training is over: skip the end-of-run evals
                break
        stop.cancel()
        process.wait(timeout=60)
    if result["step_avg"] is None:
        print("%s: no step lines (stopped at the time limit, or failed); see %s" % (script, log_path), flush=True)
    return result


def window_ms(train_ms: dict, window: str) -> str:
    """Mean ms/step from logged step A to logged step B of "A:B" (B empty: the last logged step)."""
    first, _, last = window.partition(":")
    first, last = int(first), int(last) if last else max(train_ms, default=0)
    if first not in train_ms or last not in train_ms or last <= first:
        return "n/a"
    return "%.2f" % ((train_ms[last] - train_ms[first]) / (last - first))


def parse_config(text: str) -> tuple:
    label, _, settings = text.partition(":")
    pairs = dict(item.split("=", 1) for item in settings.split(",") if item.strip())
    return label or "default", pairs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--script", action="append", type=Path, help="training script(s) (default train_gpt.py)")
    parser.add_argument("--config", action="append", help="LABEL:KEY=VAL,... (default 'record:')")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--peak-tflops", type=float, default=989.0)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    parser.add_argument("--loss-at", type=int, nargs="+", default=[100, 200],
                        help="steps whose train loss the table shows (logged every 10 steps)")
    parser.add_argument("--window", action="append", default=[], help="A:B, mean ms/step between logged steps")
    parser.add_argument("--budget", type=float, default=0.0, help="seconds for all runs together (0: no cap)")
    parser.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "step_time")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    scripts = args.script or [REPO / "train_gpt.py"]
    configs = [parse_config(text) for text in (args.config or ["record:"])]
    base = dict(os.environ, ITERATIONS=str(args.steps), MAX_WALLCLOCK_SECONDS="0", WARMDOWN_ITERS="0",
                LATE_QAT_THRESHOLD="0", VAL_LOSS_EVERY="0", TRAIN_LOG_EVERY="10", PYTHONUNBUFFERED="1")
    rows, failed, budget_end = [], 0, time.monotonic() + args.budget if args.budget > 0 else float("inf")
    for script in scripts:
        for label, settings in configs:
            env = dict(base, **settings)
            name = "%s__%s" % (script.stem, label)
            timeout = min(args.timeout, budget_end - time.monotonic())
            result = run_training(script.resolve(), env, args.nproc, args.out_dir / (name + ".log"), timeout)
            if result["step_avg"] is None:
                failed += 1
                continue
            step_s = result["step_avg"] / 1000.0
            tokens = float(env.get("TRAIN_BATCH_TOKENS", RECORD_SHAPE["TRAIN_BATCH_TOKENS"]))
            mfu = None
            if env.get("RECIPE", "2026-03-23") == "2026-03-23":
                mfu = step_flops(env) / step_s / (args.peak_tflops * 1e12 * args.nproc)
            rows.append((str(script), label, result, tokens / step_s, mfu))
            print("done %s %s: %.2f ms/step" % (script, label, result["step_avg"]), flush=True)
    print("\nsteps=%d nproc=%d model FLOPs/step at the env's shape=%.3g; logs in %s"
          % (args.steps, args.nproc, step_flops(dict(os.environ)), args.out_dir))
    print("%-34s %-14s %11s %12s %6s %9s %13s %14s %s %6s %6s%s" % (
        "script", "config", "step_avg_ms", "tokens/s", "MFU", "peak_MiB", "data_wait_ms", "val_bpb@step",
        "loss@" + "/".join(map(str, args.loss_at)), "steps", "loop@",
        "".join(" %10s" % ("ms/step" + window) for window in args.window)))
    for script, label, result, tokens_per_s, mfu in rows:
        wait = "n/a" if result["wait_ms"] is None else "%.3f" % result["wait_ms"]
        losses = "/".join(str(result["loss"].get(s, "-")) for s in args.loss_at)
        print("%-34s %-14s %11.2f %12.0f %6s %9s %13s %14s %s %6d %6s%s" % (
            script[-34:], label, result["step_avg"], tokens_per_s, "n/a" if mfu is None else "%.1f%%" % (100 * mfu),
            result["peak_mib"], wait, result["val_bpb"] or "n/a", losses, result["steps"],
            result["loop_step"] or "-", "".join(" %10s" % window_ms(result["train_ms"], w) for w in args.window)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
