"""Issue 35: what the one-RoPE-table fix is worth on a trained RECIPE=2026-04-09 artifact.

Trains one short 04-09 model with the trainer (its own artifact, TTT off), then evaluates that artifact in-process,
sliding window and legal score-first TTT, under three RoPE regimes:
  after      this trainer: one table per length (fp32 positions x bf16-rounded theta, the record's CUDA table),
             read by the compiled scoring forward and the eager TTT-training forward alike;
  before     the trainer before the fix: compiled code got the backend's table (on CUDA the same as `after`,
             bench/NOTES.md "RoPE tables"), eager code (TTT training) the all-bf16 table (bf16 positions x bf16
             theta, the product and cos/sin in bf16);
  rope_fp32  ROPE_BF16=0 tables on every path (fp32 theta), the same weights.
Prints a table of sliding and TTT bpb (and TTT's gain) per regime; one JSON line too.
  python bench/rope_ttt.py --data DIR --tokenizer MODEL [--iterations 400] [--batch-tokens 131072]"""
import argparse
import json
import os
import subprocess
import sys
import time

import torch

from harness import REPO, ConsoleLogger, configure_kernels, load_trainer


def old_eager_table(tg, model, seq_len, device, dtype):
    """The pre-fix eager rotary table of ROPE_BF16=1: positions, theta, their product and cos/sin in bf16."""
    rope_dims, head_dim = model.rope_dims, model.head_dim
    inv_freq = model.rope_base ** (-torch.arange(0, rope_dims, 2, device=device, dtype=torch.float32) / rope_dims)
    positions = torch.arange(seq_len, device=device, dtype=torch.bfloat16)
    angles = torch.outer(positions, inv_freq.to(torch.bfloat16))
    cos, sin = angles.cos().to(dtype), angles.sin().to(dtype)
    _, _, swap = tg.rotary_tables(seq_len, head_dim, rope_dims, model.rope_base, device, dtype)
    ones = torch.ones(seq_len, head_dim - rope_dims, device=device, dtype=dtype)
    return torch.cat((cos, cos, ones), dim=1), torch.cat((sin, -sin, torch.zeros_like(ones)), dim=1), swap


def train_artifact(args, run_id: str) -> str:
    env = dict(os.environ, RECIPE="2026-04-09", DATA_PATH=args.data, TOKENIZER_PATH=args.tokenizer, RUN_ID=run_id,
               ITERATIONS=str(args.iterations), TRAIN_BATCH_TOKENS=str(args.batch_tokens), MAX_WALLCLOCK_SECONDS="0",
               WARMDOWN_FRAC="0.72", VAL_LOSS_EVERY="0", TTT_ENABLED="0", GPTQ_RESERVE_SECONDS="0")
    started = time.time()
    subprocess.run([sys.executable, str(REPO / "train_gpt.py")], env=env, check=True, cwd=REPO,
                   timeout=args.train_timeout)
    print("trained %s in %.0f s" % (run_id, time.time() - started), flush=True)
    return str(REPO / "logs" / run_id / "final_model.int6.ptz")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", required=True)
    parser.add_argument("--tokenizer", required=True)
    parser.add_argument("--iterations", type=int, default=400)
    parser.add_argument("--batch-tokens", type=int, default=131072)
    parser.add_argument("--train-timeout", type=int, default=360)
    parser.add_argument("--artifact", help="evaluate this artifact instead of training one")
    args = parser.parse_args()
    tg = load_trainer(needed=("rotary_tables", "ttt_eval", "sliding_window_eval", "load_artifact_model"))
    artifact = args.artifact or train_artifact(args, "rope_ttt_%d" % int(time.time()))
    if not os.path.isfile(artifact):
        sys.exit("%s: no artifact (the trainer's ARTIFACT_FILENAME is %s)" % (artifact, tg.ARTIFACT_FILENAME))
    env = dict(os.environ, RECIPE="2026-04-09", DATA_PATH=args.data, TOKENIZER_PATH=args.tokenizer)
    dist_info = tg.init_distributed(env)
    logger = ConsoleLogger()
    rows = []
    original_tables = tg.GPT.rope_tables
    for regime in ("after", "before", "rope_fp32"):
        h = tg.Hyperparameters.from_env(dict(env, ROPE_BF16="0" if regime == "rope_fp32" else "1"))
        val = tg.load_validation_data(h, tg.load_tokenizer(h, logger), dist_info.device)
        tokens = tg.device_tokens(val, dist_info.device)

        def make_model():
            model = tg.build_model(h, dist_info.device)
            configure_kernels(tg, h, dist_info, model)
            return model

        if regime == "before":
            def rope_tables(self, seq_len, device, dtype):
                table = original_tables(self, seq_len, device, dtype)  # made (and cached) eagerly, as before
                return table if torch.compiler.is_compiling() else old_eager_table(tg, self, seq_len, device, dtype)
            tg.GPT.rope_tables = rope_tables
        else:
            tg.GPT.rope_tables = original_tables
        torch._dynamo.reset()
        model = tg.load_artifact_model(artifact, make_model)
        model.looping = h.num_loops > 0
        forward = tg.make_hidden_forward(h, dist_info, model)
        started = time.perf_counter()
        _, sliding = tg.sliding_window_eval(h, dist_info, model, forward, tokens, val.target_bytes, h.eval_stride)
        sliding_s = time.perf_counter() - started
        started = time.perf_counter()
        _, ttt = tg.ttt_eval(h, dist_info, logger, model, forward, tokens, val.target_bytes)
        rows.append(dict(regime=regime, sliding_bpb=sliding, ttt_bpb=ttt, ttt_gain=sliding - ttt,
                         sliding_s=round(sliding_s, 1), ttt_s=round(time.perf_counter() - started, 1)))
    tg.GPT.rope_tables = original_tables
    print("\n| RoPE regime | sliding bpb | TTT bpb | TTT gain | sliding s | TTT s |\n|---|---|---|---|---|---|")
    for row in rows:
        print("| %(regime)s | %(sliding_bpb).6f | %(ttt_bpb).6f | %(ttt_gain).6f | %(sliding_s)s | %(ttt_s)s |" % row)
    print(json.dumps(dict(artifact=artifact, device=torch.cuda.get_device_name() if torch.cuda.is_available()
                          else "cpu", torch=torch.__version__, rows=rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
