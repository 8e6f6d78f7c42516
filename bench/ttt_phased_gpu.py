"""Issue 31's GPU table: a short RECIPE=2026-04-27 model, then on its artifact the sliding-window eval, the full-model
score-first TTT (TTT_MODE=full at 04-09's values: lr 0.005, 3 epochs) and the phased LoRA TTT (TTT_MODE=lora_phased,
the recipe's values; TTT_PHASE_DOCS scaled to the small val set as 2,500 of 50,000 documents), each timed from the
artifact's deserialization (compile included), with each rank's own time (bench/ttt_eval_estimate.py extrapolates).

    python3 bench/ttt_phased_gpu.py                      # 1 GPU: train (if no artifact yet) + the three evals
    python3 bench/ttt_phased_gpu.py --nproc 2            # the same on 2 GPUs (trains its own artifact)
    python3 bench/ttt_phased_gpu.py --parts phased       # one part only (train / sliding / full / phased)
    python3 bench/ttt_phased_gpu.py --nproc 4 --artifact logs/ttt1_model/final_model.int6.ptz   # no training:
                                                         # the evals of this artifact (e.g. the 1-GPU run's)

Data: DATA_PATH, TOKENIZER_PATH (default .carry/wiki_caseops and .carry/caseops8192.model). The artifact and the
result rows stay under --out (default logs/ttt_bench_<nproc>), so a later call (another part, or after a command time
limit) reuses them and prints the whole table. Training: ITERATIONS (default 600) steps of TRAIN_BATCH_TOKENS
(default 131072) tokens, no wallclock cap, COMPRESSOR=lzma (no extra modules; the artifact's size is not measured)."""
import argparse
import glob
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]
RECORD_DOCS, RECORD_PHASES = 50_000, (833, 1666, 2500)
MODES = {"sliding": {"TTT_ENABLED": "0"}, "full": {"TTT_MODE": "full", "TTT_LR": "0.005", "TTT_EPOCHS": "3"},
         "phased": {"TTT_MODE": "lora_phased"}}


def base_env(args) -> dict:
    env = dict(os.environ, RECIPE="2026-04-27", PYTHONUNBUFFERED="1", COMPRESSOR=os.environ.get("COMPRESSOR", "lzma"),
               DATA_PATH=os.environ.get("DATA_PATH", ".carry/wiki_caseops"),
               TOKENIZER_PATH=os.environ.get("TOKENIZER_PATH", ".carry/caseops8192.model"),
               ITERATIONS=os.environ.get("ITERATIONS", "600"), MAX_WALLCLOCK_SECONDS="0", VAL_LOSS_EVERY="0",
               TRAIN_BATCH_TOKENS=os.environ.get("TRAIN_BATCH_TOKENS", "131072"))
    return env


def torchrun(args, extra: list, env: dict, log: Path) -> int:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={args.nproc}"] + extra
    print("$ " + " ".join(command), flush=True)
    with open(log, "w") as handle:
        return subprocess.run(command, env=env, stdout=handle, stderr=subprocess.STDOUT, cwd=REPO).returncode


def train(args, out: Path) -> Path:
    """The trainer with TTT off; its artifact (and the sliding-window score in its log)."""
    run_id = out.name + "_model"  # the trainer refuses an existing logs/<RUN_ID>/ folder
    artifact = REPO / "logs" / run_id / "final_model.int6.ptz"
    if artifact.is_file():
        return artifact
    env = dict(base_env(args), TTT_ENABLED="0", RUN_ID=run_id)
    started = time.perf_counter()
    status = torchrun(args, ["train_gpt.py"], env, out / "train.log")
    print(f"train: exit {status} in {time.perf_counter() - started:.0f}s; log {out / 'train.log'}", flush=True)
    if status != 0:
        sys.exit(open(out / "train.log").read()[-3000:])
    return artifact


def phase_docs(tg, env: dict) -> str:
    """The record's phase boundaries at this val set's document count (2,500 of 50,000 scored documents)."""
    h = tg.Hyperparameters.from_env(env)
    tokens = np.concatenate([tg.load_data_shard(p) for p in sorted(glob.glob(h.val_files))])
    docs = len(tg.document_spans(torch.from_numpy(tokens.astype(np.int64))))
    return ",".join(str(max(k + 1, round(docs * b / RECORD_DOCS))) for k, b in enumerate(RECORD_PHASES))


def evaluate(args) -> None:
    """One eval under torchrun: everything from deserialization to the score, per rank; rank 0 prints a JSON row."""
    sys.path.insert(0, str(REPO / "bench"))
    from trainer_module import ConsoleLogger, configure_kernels, load_trainer
    tg = load_trainer()
    env = dict(base_env(args), **MODES[args.eval])
    if args.eval == "phased":
        env["TTT_PHASE_DOCS"] = phase_docs(tg, env)
    h = tg.Hyperparameters.from_env(env)
    dist_info = tg.init_distributed(os.environ)
    logger = ConsoleLogger() if dist_info.is_main else type("Quiet", (), {"log": lambda self, *a, **k: None})()
    val = tg.load_validation_data(h, tg.load_tokenizer(h, logger), dist_info.device)
    tokens = tg.device_tokens(val, dist_info.device)
    # this rank's own seconds in each part of the phased eval (a rank that is done waits in a collective), printed
    # as each ends: the scoring of its batches, the warm-up, each phase's gather (the wait for every rank) and SGD
    spent = {"lora_ttt_batch": [], "warm_up_lora_ttt": [], "gather_phase_documents": [], "global_sgd_phase": []}

    def timed(name, work):
        def run(*a):
            tg.sync_device(dist_info)
            begin = time.perf_counter()
            result = work(*a)
            tg.sync_device(dist_info)
            spent[name].append(time.perf_counter() - begin)
            if name != "lora_ttt_batch":
                print(f"rank {dist_info.rank}: {name} {spent[name][-1]:.1f}s at {time.perf_counter() - started:.1f}s",
                      flush=True)
            return result
        return run
    for name in spent:
        setattr(tg, name, timed(name, getattr(tg, name)))
    busy = spent["lora_ttt_batch"]
    tg.sync_device(dist_info)
    tg.barrier(dist_info)
    started = time.perf_counter()

    def make_model():
        model = tg.build_model(h, dist_info.device)
        configure_kernels(tg, h, dist_info, model)
        return model
    model = tg.load_artifact_model(args.artifact, make_model)
    model.looping = h.num_loops > 0
    loaded = time.perf_counter() - started
    if args.eval == "phased":
        loss, bpb = tg.phased_ttt_eval(h, dist_info, logger, model, tokens, val.target_bytes)
    elif args.eval == "sliding":
        forward = tg.make_hidden_forward(h, dist_info, model)
        loss, bpb = tg.sliding_window_eval(h, dist_info, model, forward, tokens, val.target_bytes, h.eval_stride)
    else:
        forward = tg.make_hidden_forward(h, dist_info, model)
        loss, bpb = tg.ttt_eval(h, dist_info, logger, model, forward, tokens, val.target_bytes)
    tg.sync_device(dist_info)
    mine = torch.tensor([time.perf_counter() - started, sum(busy), len(busy)], device=dist_info.device,
                        dtype=torch.float64)
    every = [torch.zeros_like(mine) for _ in range(dist_info.world_size)]
    if dist_info.distributed:
        torch.distributed.all_gather(every, mine)
    else:
        every = [mine]
    if dist_info.is_main:
        print("ROW " + json.dumps(dict(mode=args.eval, nproc=dist_info.world_size, val_loss=loss, val_bpb=bpb,
                                       eval_s=max(t[0].item() for t in every), deserialize_s=loaded,
                                       rank_busy_s=[round(t[1].item(), 1) for t in every],
                                       rank_batches=[int(t[2].item()) for t in every], targets=val.num_targets,
                                       phase_docs=env.get("TTT_PHASE_DOCS", ""))), flush=True)
    if dist_info.distributed:
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def table(out: Path) -> None:
    rows = [json.loads(line) for line in open(out / "rows.jsonl")] if (out / "rows.jsonl").is_file() else []
    print("\n| eval | GPUs | val_bpb | eval s (from deserialization) | per-rank busy s (phased: own batches) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['mode']} | {row['nproc']} | {row['val_bpb']:.5f} | {row['eval_s']:.1f} | "
              f"{row['rank_busy_s'] if row['mode'] == 'phased' else '-'} |")
    for row in rows:
        if row["mode"] != "phased":
            continue
        log = (out / "phased.log").read_text()
        compile_s = float(log.split("ttt_phased:done compile:")[1].split("s")[0])
        phases = [line for line in log.splitlines() if line.startswith("ttt_phased:phase")]
        field = lambda line, key: float(line.split(key + ":")[1].split()[0].rstrip("s"))  # noqa: E731
        print(f"\nphased, {row['nproc']} GPU(s): deserialize {row['deserialize_s']:.1f}s, compile warm-up "
              f"{compile_s:.1f}s, scoring (slowest rank) {max(row['rank_busy_s']):.1f}s for {row['targets']:,} "
              f"targets; phases (rank 0): " + ", ".join(
                  f"{field(p, 'sgd_tokens'):,.0f} SGD tokens in {field(p, 'sgd_time'):.1f}s after a "
                  f"{field(p, 'wait'):.1f}s wait" for p in phases))
    print("\nThe 8xH100 estimate: bench/ttt_eval_estimate.py (the schedule simulated with a measured cost model).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--parts", default="train,sliding,full,phased")
    parser.add_argument("--out", default="")
    parser.add_argument("--eval", choices=sorted(MODES), help=argparse.SUPPRESS)  # one eval, under torchrun
    parser.add_argument("--artifact", help="evaluate this artifact (a RECIPE=2026-04-27 model) instead of training")
    args = parser.parse_args()
    if args.eval:
        return evaluate(args)
    out = Path(args.out or REPO / "logs" / f"ttt_bench_{args.nproc}")
    out.mkdir(parents=True, exist_ok=True)
    artifact = Path(args.artifact).resolve() if args.artifact else train(args, out)
    if not artifact.is_file():
        sys.exit(f"--artifact {artifact}: no such file")
    for part in [p for p in args.parts.split(",") if p in MODES]:
        status = torchrun(args, [str(Path(__file__).resolve()), "--eval", part, "--artifact", str(artifact)],
                          base_env(args), out / f"{part}.log")
        text = (out / f"{part}.log").read_text()
        rows = [line[4:] for line in text.splitlines() if line.startswith("ROW ")]
        print(f"{part}: exit {status} " + (rows[0] if rows else text[-3000:]), flush=True)
        if rows:
            with open(out / "rows.jsonl", "a") as handle:
                handle.write(rows[0] + "\n")
    table(out)


if __name__ == "__main__":
    main()
