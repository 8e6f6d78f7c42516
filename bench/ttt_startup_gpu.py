"""Where the start of a RECIPE=2026-04-27 run and of its phased LoRA TTT goes, on one GPU, without data or an artifact:
seconds of the start-up kernel choice (select_kernels: every probe), of build_model, and of the phased TTT's
warm-up, as warm_up_lora_ttt runs it: one forward + backward + AdamW step at each power-of-two row length from 64 to
EVAL_SEQ_LEN (the first two should compile a graph each, the rest none: a compile at a later length shows as a slow
first step), then one more step at each length (the compiled cost of a step of 64 documents).

    python3 bench/ttt_startup_gpu.py [--budget 280]

Settings come from the environment (RECIPE defaults to 2026-04-27); the model is the seeded initial one (timings do
not depend on the weights). Stops at --budget seconds, printing what it measured."""
import argparse
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_module import load_trainer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=280.0)
    args = parser.parse_args()
    started = time.perf_counter()
    tg = load_trainer()
    h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE=os.environ.get("RECIPE", "2026-04-27")))
    dist_info = tg.init_distributed({})
    rows = []

    def timed(label, work):
        tg.sync_device(dist_info)
        begin = time.perf_counter()
        result = work()
        tg.sync_device(dist_info)
        rows.append((label, time.perf_counter() - begin))
        print("%-40s %8.1f s" % rows[-1], flush=True)
        return result
    kernels = timed("select_kernels (all probes)", lambda: tg.select_kernels(h, dist_info))
    model = timed("build_model", lambda: tg.build_model(h, dist_info.device))
    tg.use_kernels(model, *(kernels[part][0] for part in ("attention", "qk", "mlp", "ce", "doc_attention")))
    model.looping = h.num_loops > 0
    model.requires_grad_(False).eval()
    lora = tg.BatchedLoRA(h, sum(map(len, model.layer_orders[model.looping])), h.ttt_doc_batch, dist_info.device)
    optimizer = torch.optim.AdamW(lora.parameters(), lr=h.ttt_lora_lr, betas=(0.0, 0.99), eps=1e-10,
                                  weight_decay=h.ttt_lora_wd)
    nll_fn = tg.make_lora_nll(h, dist_info, model, lora)
    ctx, chunk = h.effective_eval_seq_len, h.ttt_lora_chunk
    generator = torch.Generator(dist_info.device).manual_seed(0)
    for seq_len in sorted({tg.lora_context(end, ctx) for end in range(chunk, ctx + chunk)}):
        x = torch.randint(0, h.vocab_size, (h.ttt_doc_batch, seq_len), device=dist_info.device, generator=generator)
        y = torch.randint(0, h.vocab_size, (h.ttt_doc_batch, chunk), device=dist_info.device, generator=generator)
        picks = (seq_len - chunk + torch.arange(chunk, device=dist_info.device)).repeat(h.ttt_doc_batch, 1)

        def step():
            with tg.autocast_context(dist_info):
                nll = nll_fn(x, y, picks)
            nll.mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        for label in ("compile + first step", "second step"):
            if time.perf_counter() - started > args.budget:
                print("budget reached", flush=True)
                return
            timed("length %d: %s" % (seq_len, label), step)
    print("\nRECIPE=%s on %s; total %.1f s" % (h.recipe, torch.cuda.get_device_name(0) if dist_info.is_cuda else "CPU",
                                                time.perf_counter() - started))


if __name__ == "__main__":
    main()
