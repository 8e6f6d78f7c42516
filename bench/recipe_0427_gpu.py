"""Issue 30's GPU checks of RECIPE=2026-04-27 on one host, one command per part, each under --budget seconds
(default 500: a 9.5-minute limit with the start-up). Runs go through bench/step_time.py's runner (stopped at the
peak-memory line, so no end-of-run eval), on ITERATIONS=--steps with no wallclock cap, WARMUP_STEPS=3 (the plain and
the looped graph still compile off the clock), looping from 35% (step 70 of 200).

  --part compare (default), 1 GPU: three rows in one table, same GPU, same call:
      0427        RECIPE=2026-04-27 on CaseOps data: TRAIN_LOADER=documents, document-aware attention
      0409        RECIPE=2026-04-09 on the sp8192 data (the baseline of the 0.90x speed target)
      0427_dense  RECIPE=2026-04-27 with TRAIN_LOADER=shuffled: 04-09's rows and dense causal attention
    columns: ms/step before looping (steps 10-70) and after (80 to the end), pre-loop ratio to 0409, train loss at
    steps 50/100/150/200, peak memory, the chosen attention backends and kernels (from each run's log).
  --part world --worlds 1,2: RECIPE=2026-04-27 at each world size, same global batch (the document loader gives
    every world size the same 8 spans per step): ms/step, scaling (1-GPU ms/step / N-GPU ms/step, when world size 1
    is a row), and train_loss next to val_loss at the VAL_LOSS_EVERY steps. Each run's log also comes as
    <label>.stamped (the seconds since its launch before each line).

--batch-tokens (default 262,144 = 8 rows of 32,768 tokens: a third of the record's step, so 200 steps of three
configs fit one call) applies to every row alike; --batch-tokens 786432 is the record's step (then use --configs to
run one or two rows per call). Leftover train_gpt.py processes on the GPUs (nvidia-smi --query-compute-apps) are
killed first.

  python bench/recipe_0427_gpu.py --caseops .carry/wiki_caseops --caseops-tokenizer .carry/caseops8192.model \\
      --sp8192 .carry/wiki8192 --sp8192-tokenizer .carry/sp8192.model
  python bench/recipe_0427_gpu.py --part world --worlds 1,4 --caseops .carry/wiki_caseops \\
      --caseops-tokenizer .carry/caseops8192.model
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from step_time import REPO, run_training, window_ms  # noqa: E402

KERNEL_LINES = re.compile(r"^(attention_backend|doc_attention_backend|qk_kernel|mlp_kernel|ce_kernel):(\S+)")
VAL_LINE = re.compile(r"^step:(\d+)/\d+ val_loss:([\d.]+)")


def kill_leftover_trainers() -> None:
    """Processes on the GPUs whose command line runs train_gpt.py (a previous call's workers) are killed; not under
    bench/on_gpus.sh (LEFTOVERS_KILLED=1), which did it once before starting its runs side by side."""
    if os.environ.get("LEFTOVERS_KILLED") == "1":
        return
    try:
        pids = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], text=True,
                              capture_output=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return
    for pid in (int(p) for p in pids if p.isdigit()):
        try:
            if b"train_gpt.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                print(f"killing leftover trainer pid {pid}", flush=True)
                os.kill(pid, signal.SIGKILL)
        except (OSError, ProcessLookupError):
            pass
    time.sleep(2)


def kernels_of(log_path: Path) -> str:
    found = {}
    for line in log_path.read_text(errors="replace").splitlines():
        match = KERNEL_LINES.match(line)
        if match and match.group(1) not in found:
            found[match.group(1)] = match.group(2)
    short = {"attention_backend": "attn", "doc_attention_backend": "doc", "qk_kernel": "qk", "mlp_kernel": "mlp",
             "ce_kernel": "ce"}
    return " ".join("%s=%s" % (short[key], value) for key, value in found.items())


def data_env(path: str, tokenizer: str) -> dict:
    for item in (path, tokenizer):
        if not item or not os.path.exists(item):
            sys.exit(f"recipe_0427_gpu: {item!r} does not exist (pass the data paths: --help)")
    return {"DATA_PATH": path, "TOKENIZER_PATH": tokenizer}


def run_rows(args, rows, nprocs) -> list:
    """(label, nproc, env) rows, each with an equal share of what is left of the budget."""
    end, results = time.monotonic() + args.budget, []
    base = dict(os.environ, ITERATIONS=str(args.steps), MAX_WALLCLOCK_SECONDS="0", WARMUP_STEPS="3",
                TRAIN_LOG_EVERY="10", TRAIN_BATCH_TOKENS=str(args.batch_tokens), FINAL_EVAL="0",
                PYTHONUNBUFFERED="1")
    for index, ((label, settings), nproc) in enumerate(zip(rows, nprocs)):
        timeout = (end - time.monotonic()) / (len(rows) - index)
        log_path = args.out_dir / f"{label}.log"
        print(f"== {label}: nproc {nproc}, at most {timeout:.0f} s", flush=True)
        result = run_training(REPO / "train_gpt.py", dict(base, **settings), nproc, log_path, timeout)
        result["kernels"] = kernels_of(log_path) if log_path.exists() else ""
        result["val"] = {int(m.group(1)): m.group(2) for m in map(VAL_LINE.match, log_path.read_text(
            errors="replace").splitlines()) if m} if log_path.exists() else {}
        results.append((label, nproc, result))
        error = [line for line in log_path.read_text(errors="replace").splitlines() if line.startswith("error")]
        if error or result["step_avg"] is None:
            print(f"{label}: {error[-1] if error else 'no step lines'} (log {log_path})", flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--part", choices=("compare", "world"), default="compare")
    parser.add_argument("--configs", default="0427,0409,0427_dense", help="compare: which rows, in order")
    parser.add_argument("--caseops", default=".carry/wiki_caseops", help="CaseOps sp8192 DATA_PATH (04-27)")
    parser.add_argument("--caseops-tokenizer", default=".carry/caseops8192.model")
    parser.add_argument("--sp8192", default=".carry/wiki8192", help="plain sp8192 DATA_PATH (04-09)")
    parser.add_argument("--sp8192-tokenizer", default=".carry/sp8192.model")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--batch-tokens", type=int, default=262144)
    parser.add_argument("--worlds", default="1,2", help="world: the world sizes, one run each, in order")
    parser.add_argument("--val-every", type=int, default=50, help="world: VAL_LOSS_EVERY")
    parser.add_argument("--budget", type=float, default=500.0, help="seconds for the part's runs together")
    parser.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "recipe_0427_gpu")
    args = parser.parse_args()
    args.out_dir.mkdir(parents=True, exist_ok=True)
    kill_leftover_trainers()
    subprocess.run([sys.executable, "-c", "import torch; print(torch.__version__, torch.cuda.get_device_name(0) "
                    "if torch.cuda.is_available() else 'no CUDA device', torch.cuda.device_count(), 'GPU(s)')"])
    caseops = data_env(args.caseops, args.caseops_tokenizer)
    loss_at = [s for s in (50, 100, 150, 200, 250) if s <= args.steps]
    if args.part == "world":
        world = dict(caseops, RECIPE="2026-04-27", VAL_LOSS_EVERY=str(args.val_every))
        worlds = [int(part) for part in args.worlds.split(",") if part.strip()]
        if not worlds or any(8 % n for n in worlds):
            sys.exit(f"--worlds {args.worlds!r}: expected world sizes that divide 8, e.g. 1,4")
        results = run_rows(args, [(f"world{n}", world) for n in worlds], worlds)
        base = results[0][2]["step_avg"] if worlds[0] == 1 else None
        print(f"\nRECIPE=2026-04-27, {args.steps} steps of {args.batch_tokens} tokens; logs in {args.out_dir}")
        print("%-8s %6s %11s %8s %6s  %s" % ("run", "nproc", "step_avg_ms", "scaling", "steps",
                                           "step: train_loss / val_loss"))
        for label, nproc, result in results:
            scaling = "%.2fx" % (base / result["step_avg"]) if base and result["step_avg"] else "n/a"
            pairs = " ".join("%d:%s/%s" % (s, result["loss"].get(s, "-"), v) for s, v in sorted(result["val"].items()))
            print("%-8s %6d %11s %8s %6d  %s" % (label, nproc, result["step_avg"], scaling, result["steps"], pairs))
        return 0 if all(r["step_avg"] for _, _, r in results) else 1
    known = {"0427": dict(caseops, RECIPE="2026-04-27"),
             "0409": dict(data_env(args.sp8192, args.sp8192_tokenizer), RECIPE="2026-04-09"),
             "0427_dense": dict(caseops, RECIPE="2026-04-27", TRAIN_LOADER="shuffled")}
    labels = [label.strip() for label in args.configs.split(",") if label.strip()]
    unknown = [label for label in labels if label not in known]
    if unknown:
        sys.exit(f"--configs: unknown {unknown}; expected some of {', '.join(known)}")
    results = run_rows(args, [(label, known[label]) for label in labels], [1] * len(labels))
    loop_end = int(0.35 * args.steps) // 10 * 10
    windows = ["10:%d" % loop_end, "%d:" % (loop_end + 10)]
    pre = {label: window_ms(result["train_ms"], windows[0]) for label, _, result in results}
    print(f"\n{args.steps} steps of {args.batch_tokens} tokens on 1 GPU; looping from step {loop_end}; "
          f"logs in {args.out_dir}")
    print("%-11s %10s %11s %9s %-30s %9s %6s  %s" % ("config", "ms/step<" + str(loop_end), "ms/step>" + str(loop_end),
                                                  "pre/0409", "loss@" + "/".join(map(str, loss_at)), "peak_MiB",
                                                  "steps", "backends and kernels"))
    for label, _, result in results:
        ratio = "n/a"
        if pre.get("0409", "n/a") != "n/a" and pre[label] != "n/a":
            ratio = "%.3f" % (float(pre[label]) / float(pre["0409"]))
        losses = "/".join(str(result["loss"].get(s, "-")) for s in loss_at)
        print("%-11s %10s %11s %9s %-30s %9s %6d  %s" % (
            label, pre[label], window_ms(result["train_ms"], windows[1]), ratio, losses, result["peak_mib"],
            result["steps"], result["kernels"]))
    return 0 if all(r["step_avg"] for _, _, r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
