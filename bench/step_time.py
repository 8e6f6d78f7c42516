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
--peak-tflops (H100 SXM dense bf16: 989).
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RECORD_SHAPE = dict(NUM_LAYERS=11, MODEL_DIM=512, NUM_HEADS=8, NUM_KV_HEADS=4, MLP_MULT=3.0, VOCAB_SIZE=1024,
                    TRAIN_SEQ_LEN=2048, TRAIN_BATCH_TOKENS=786432, BIGRAM_DIM=128, VE_DIM=128, VE_LAYERS="9,10")
STEP_LINE = re.compile(r"^step:(\d+)/\d+ train_loss:([\d.]+) train_time:(\d+)ms step_avg:([\d.]+)ms")
PEAK_LINE = re.compile(r"^peak memory allocated: (\d+) MiB")
WAIT_LINE = re.compile(r"^data_wait total_ms:[\d.]+ per_step_ms:([\d.]+)")
VAL_LINE = re.compile(r"^step:(\d+)/\d+ val_loss:[\d.]+ val_bpb:([\d.]+)")


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


def run_training(script: Path, env: dict, nproc: int, log_path: Path, timeout: float) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % nproc,
               str(script)]
    result = {"step_avg": None, "steps": 0, "peak_mib": None, "wait_ms": None, "loss": {}, "val_bpb": None}
    deadline = time.monotonic() + timeout
    with open(log_path, "w") as log, subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                                       stderr=subprocess.STDOUT, text=True,
                                                       start_new_session=True) as process:
        for line in process.stdout:
            log.write(line)
            step = STEP_LINE.match(line)
            if step:
                result["steps"], result["step_avg"] = int(step.group(1)), float(step.group(4))
                result["loss"][int(step.group(1))] = step.group(2)
            val = VAL_LINE.match(line)
            if val:  # the last one (the end of training: every script validates at its final step)
                result["val_bpb"] = "%s@%s" % (val.group(2), val.group(1))
            wait = WAIT_LINE.match(line)
            if wait:
                result["wait_ms"] = float(wait.group(1))
            peak = PEAK_LINE.match(line)
            if peak or time.monotonic() > deadline:
                result["peak_mib"] = int(peak.group(1)) if peak else None
                os.killpg(process.pid, signal.SIGTERM)  # training is over: skip the end-of-run evals
                break
        process.wait(timeout=60)
    if result["step_avg"] is None:
        sys.exit("%s: no step lines; see %s" % (script, log_path))
    return result


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
    parser.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "step_time")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    scripts = args.script or [REPO / "train_gpt.py"]
    configs = [parse_config(text) for text in (args.config or ["record:"])]
    base = dict(os.environ, ITERATIONS=str(args.steps), MAX_WALLCLOCK_SECONDS="0", WARMDOWN_ITERS="0",
                LATE_QAT_THRESHOLD="0", VAL_LOSS_EVERY="0", TRAIN_LOG_EVERY="10", PYTHONUNBUFFERED="1")
    rows = []
    for script in scripts:
        for label, settings in configs:
            env = dict(base, **settings)
            name = "%s__%s" % (script.stem, label)
            result = run_training(script.resolve(), env, args.nproc, args.out_dir / (name + ".log"), args.timeout)
            flops = step_flops(env)
            step_s = result["step_avg"] / 1000.0
            tokens = float(env.get("TRAIN_BATCH_TOKENS", RECORD_SHAPE["TRAIN_BATCH_TOKENS"]))
            mfu = flops / step_s / (args.peak_tflops * 1e12 * args.nproc)
            rows.append((str(script), label, result, tokens / step_s, mfu))
            print("done %s %s: %.2f ms/step" % (script, label, result["step_avg"]), flush=True)
    print("\nsteps=%d nproc=%d model FLOPs/step at the env's shape=%.3g; logs in %s"
          % (args.steps, args.nproc, step_flops(dict(os.environ)), args.out_dir))
    print("%-34s %-14s %11s %12s %6s %9s %13s %14s %s" % (
        "script", "config", "step_avg_ms", "tokens/s", "MFU", "peak_MiB", "data_wait_ms", "val_bpb@step",
        "loss@" + "/".join(map(str, args.loss_at))))
    for script, label, result, tokens_per_s, mfu in rows:
        wait = "n/a" if result["wait_ms"] is None else "%.3f" % result["wait_ms"]
        losses = "/".join(str(result["loss"].get(s, "-")) for s in args.loss_at)
        print("%-34s %-14s %11.2f %12.0f %5.1f%% %9s %13s %14s %s" % (
            script[-34:], label, result["step_avg"], tokens_per_s, 100 * mfu, result["peak_mib"], wait,
            result["val_bpb"] or "n/a", losses))
    return 0


if __name__ == "__main__":
    sys.exit(main())
