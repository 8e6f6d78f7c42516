"""Train with TRAIN_PREFETCH 0/1 x TRAIN_COPY_STREAM 0/1 and print one table: step_avg, data wait, losses.

Each combination is a separate `torchrun --standalone --nproc_per_node=N train_gpt.py` with the same env, so it
measures the real training loop (compile, attention backend and all). The first combination is run twice as a
control: if the control repeats its losses bit for bit, every other combination must too (same tokens, same
order, same math); a mismatch is reported and the script exits 1.

  python bench/prefetch_matrix.py --preset record --steps 120      # 1xH100: the issue's benchmark
  python bench/prefetch_matrix.py --preset small --steps 20 --deterministic   # stream-logic check (eager)

Extra settings go through the environment as usual (DATA_PATH, TOKENIZER_PATH, ...).
"""
import argparse
import itertools
import os
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PRESETS = {
    # The record model and batch; no warmdown/QAT/SWA so every step does the same work.
    "record": {"WARMDOWN_ITERS": "0", "LATE_QAT_THRESHOLD": "0", "MAX_WALLCLOCK_SECONDS": "0", "VAL_LOSS_EVERY": "0",
               "WARMUP_STEPS": "5", "FINAL_EVAL": "0"},
    # A small model in eager mode: quick, and it logs every step for the bit-identity check.
    "small": {"NUM_LAYERS": "4", "MODEL_DIM": "256", "NUM_HEADS": "4", "NUM_KV_HEADS": "2", "XSA_LAST_N": "2",
              "VE_LAYERS": "2,3", "TRAIN_SEQ_LEN": "1024", "EVAL_SEQ_LEN": "1024", "TRAIN_BATCH_TOKENS": "65536",
              "VAL_BATCH_SIZE": "65536", "WARMDOWN_ITERS": "0", "LATE_QAT_THRESHOLD": "0",
              "MAX_WALLCLOCK_SECONDS": "0", "VAL_LOSS_EVERY": "0", "TORCH_COMPILE": "0", "WARMUP_STEPS": "2",
              "FINAL_EVAL": "0"},
}
STEP_LINE = re.compile(r"^step:(\d+)/\d+ train_loss:([\d.]+) train_time:(\d+)ms step_avg:([\d.]+)ms", re.M)
WAIT_LINE = re.compile(r"^data_wait total_ms:([\d.]+) per_step_ms:([\d.]+) fraction_of_train_time:([\d.]+)", re.M)


def run_one(env: dict, nproc: int, label: str, out_dir: Path, script: Path) -> dict:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % nproc,
               str(script)]
    start = time.perf_counter()
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    (out_dir / ("%s.log" % label)).write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        sys.exit("%s failed (exit %d):\n%s" % (label, result.returncode, (result.stdout + result.stderr)[-3000:]))
    steps = {int(m.group(1)): (m.group(2), float(m.group(4))) for m in STEP_LINE.finditer(result.stdout)}
    wait = WAIT_LINE.search(result.stdout)
    if not steps or wait is None:
        sys.exit("%s: no step or data_wait lines in its output; see %s" % (label, out_dir))
    last = max(steps)
    return {"losses": {s: loss for s, (loss, _) in steps.items()}, "steps": last, "step_avg": steps[last][1],
            "wait_per_step": float(wait.group(2)), "wait_fraction": float(wait.group(3)),
            "wall_s": time.perf_counter() - start}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="record")
    parser.add_argument("--steps", type=int, default=120)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--deterministic", action="store_true",
                        help="run through bench/deterministic_launch.py (deterministic kernels; use ATTN_BACKEND=math)")
    parser.add_argument("--no-control", action="store_true", help="skip the repeat of the first combination")
    parser.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "prefetch_matrix")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    log_every = "1" if args.preset == "small" else "20"
    base = dict(os.environ, **PRESETS[args.preset], ITERATIONS=str(args.steps), TRAIN_LOG_EVERY=log_every)
    combos = [(1, 1)] + ([] if args.no_control else [(1, 1)]) + [c for c in itertools.product((0, 1), (0, 1)) if c != (1, 1)]
    rows, stamp = [], time.strftime("%Y%m%d_%H%M%S")  # the trainer refuses a RUN_ID whose log exists
    for index, (prefetch, copy_stream) in enumerate(combos):
        label = "p%d_c%d%s" % (prefetch, copy_stream, "_control" if index == 1 and not args.no_control else "")
        env = dict(base, TRAIN_PREFETCH=str(prefetch), TRAIN_COPY_STREAM=str(copy_stream),
                   RUN_ID="matrix_%s_%s" % (stamp, label))
        script = REPO / ("bench/deterministic_launch.py" if args.deterministic else "train_gpt.py")
        rows.append((label, prefetch, copy_stream, run_one(env, args.nproc, label, args.out_dir, script)))
        print("done %s in %.0f s" % (label, rows[-1][3]["wall_s"]), flush=True)
    reference = rows[0][3]["losses"]
    mismatches = 0
    print("\npreset=%s steps=%d nproc=%d (logs in %s)" % (args.preset, args.steps, args.nproc, args.out_dir))
    print("%-14s %8s %11s %12s %16s %13s %s" % ("run", "prefetch", "copy_stream", "step_avg_ms", "data_wait_ms/step",
                                                 "wait_%_step", "losses == first run"))
    for label, prefetch, copy_stream, result in rows:
        same = result["losses"] == reference
        mismatches += not same
        shown = [s for s in sorted(reference) if s in (1, 10, 20, 50, 100, args.steps)]
        print("%-14s %8d %11d %12.2f %16.3f %13.4f %s  (%s)" % (
            label, prefetch, copy_stream, result["step_avg"], result["wait_per_step"],
            100.0 * result["wait_fraction"], "yes" if same else "NO",
            " ".join("%d:%s" % (s, result["losses"].get(s)) for s in shown)))
    if mismatches:
        print("\n%d run(s) differ from the first: the data path changed what was trained on" % mismatches)
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
