"""Where the start of a RECIPE=2026-04-27 run and of its phased LoRA TTT goes, on one GPU, without data or an artifact,
and what a TTT step costs once compiled (the cost model of bench/ttt_eval_estimate.py's 8-GPU estimate):
  - seconds of the start-up kernel choice (select_kernels: every probe) and of build_model;
  - warm_up_lora_ttt as the eval runs it (the global SGD's forward + backward on a packed row, then a LoRA step at
    each power-of-two row length from 64 to EVAL_SEQ_LEN and with each smaller power of 2 of rows: the first
    compiles the one dynamic graph);
  - after it, milliseconds per LoRA step (forward + backward + AdamW) at each row length on TTT_DOC_BATCH rows
    ("lora_step_ms") and on 32, 8 and 2 rows ("lora_step_ms_rows_<n>": a step computes only the rows whose
    documents go on), and per global-SGD forward + backward at world sizes 1, 2, 4, 8 (one rank's share of a
    TTT_CHUNK_TOKENS chunk), each the mean of --repeats steps after one more untimed one (one that compiled shows as
    "recompiled").

    python3 bench/ttt_startup_gpu.py [--budget 280] [--repeats 5] [--json OUT]

Settings come from the environment (RECIPE defaults to 2026-04-27); the model is the seeded initial one (timings do
not depend on the weights). Stops at --budget seconds, printing what it measured."""
import argparse
import json
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
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="also write the measurements here")
    args = parser.parse_args()
    started = time.perf_counter()
    tg = load_trainer()
    h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE=os.environ.get("RECIPE", "2026-04-27")))
    dist_info = tg.init_distributed({})
    result = {"device": torch.cuda.get_device_name(0) if dist_info.is_cuda else "CPU", "torch": torch.__version__,
              "recipe": h.recipe, "doc_batch": h.ttt_doc_batch, "seconds": {}, "lora_step_ms": {}, "sgd_ms": {}}

    def timed(work, repeats=1):
        tg.sync_device(dist_info)
        begin = time.perf_counter()
        for _ in range(repeats):
            work()
        tg.sync_device(dist_info)
        return (time.perf_counter() - begin) / repeats

    def report():
        if args.json:
            Path(args.json).write_text(json.dumps(result, indent=1))
        print("\nRECIPE=%s on %s; total %.1f s" % (h.recipe, result["device"], time.perf_counter() - started))

    kernels = {}
    result["seconds"]["select_kernels"] = timed(lambda: kernels.update(tg.select_kernels(h, dist_info)))
    holder = {}
    result["seconds"]["build_model"] = timed(lambda: holder.update(model=tg.build_model(h, dist_info.device)))
    model = holder["model"]
    tg.use_kernels(model, *(kernels[part][0] for part in ("attention", "qk", "mlp", "ce", "doc_attention")))
    model.looping = h.num_loops > 0
    model.requires_grad_(False).eval()
    lora = tg.BatchedLoRA(h, sum(map(len, model.layer_orders[model.looping])), h.ttt_doc_batch, dist_info.device)
    optimizer = torch.optim.AdamW(lora.parameters(), lr=h.ttt_lora_lr, betas=(0.0, 0.99), eps=1e-10,
                                  weight_decay=h.ttt_lora_wd)
    nll_fn = tg.make_lora_nll(h, dist_info, model, lora)
    result["seconds"]["warm_up_lora_ttt"] = timed(lambda: tg.warm_up_lora_ttt(h, dist_info, model, nll_fn, lora,
                                                                             optimizer))
    for label, seconds in result["seconds"].items():
        print("%-32s %8.1f s" % (label, seconds), flush=True)
    ctx, chunk, device = h.effective_eval_seq_len, h.ttt_lora_chunk, dist_info.device
    generator = torch.Generator(device).manual_seed(0)
    counts = sorted({h.ttt_doc_batch} | {1 << k for k in range(1, (h.ttt_doc_batch - 1).bit_length(), 2)},
                    reverse=True)
    print("\nLoRA step: rows, row length, ms (a step computes the rows whose documents go on, a power of 2 of them)")
    for rows, seq_len in [(n, length) for n in counts
                          for length in sorted({tg.lora_context(end, ctx) for end in range(chunk, ctx + chunk)})]:
        x = torch.randint(0, h.vocab_size, (rows, seq_len), device=device, generator=generator)
        y = torch.randint(0, h.vocab_size, (rows, chunk), device=device, generator=generator)
        picks = (seq_len - chunk + torch.arange(chunk, device=device)).repeat(rows, 1)

        def step():
            with tg.autocast_context(dist_info):
                nll = nll_fn(x, y, picks)
            nll.mean().backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        if time.perf_counter() - started > args.budget:
            return report()
        first = timed(step)
        ms = 1000 * timed(step, args.repeats)
        key = "lora_step_ms" if rows == h.ttt_doc_batch else "lora_step_ms_rows_%d" % rows
        result.setdefault(key, {})[seq_len] = ms
        print("%4d %6d %9.1f%s" % (rows, seq_len, ms, "  (recompiled: %.1f s)" % first
                                     if first > 10 * ms / 1000 + 1 else ""), flush=True)
    print("\nglobal SGD forward + backward (one rank's share of a %d-token chunk): world size, row tokens, ms, "
          "tokens/s per GPU" % h.ttt_chunk_tokens)
    for world in (1, 2, 4, 8):
        seqs = min(h.ttt_batch_seqs, tg.ceil_div(h.ttt_chunk_tokens // h.train_seq_len, world))
        row = torch.randint(0, h.vocab_size, (1, seqs * h.train_seq_len + 1), device=device, generator=generator)
        cu_seqlens = torch.from_numpy(tg.document_cu_seqlens(row[0, :-1].cpu().numpy(), tg.BOS_ID, h.train_seq_len,
                                                             tg.CU_SEQLENS_BUCKET)).to(device)
        tg.prepare_ttt_parameters(model.requires_grad_(True).train(), h.ttt_freeze_blocks)

        def sgd():
            with tg.autocast_context(dist_info):
                loss = model(row[:, :-1], row[:, 1:], cu_seqlens)
            loss.backward()
        if time.perf_counter() - started > args.budget:
            break
        first = timed(sgd)
        ms = 1000 * timed(sgd, args.repeats)
        result["sgd_ms"][world] = ms
        print("%6d %8d %9.1f %11.0f%s" % (world, row.numel() - 1, ms, (row.numel() - 1) / ms * 1000,
                                          "  (first: %.1f s)" % first if first > 10 * ms / 1000 + 1 else ""),
              flush=True)
        model.eval().requires_grad_(False).zero_grad(set_to_none=True)
    report()


if __name__ == "__main__":
    main()
