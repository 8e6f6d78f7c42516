"""The compiled training forward + backward of RECIPE=2026-04-27 on one GPU, for comparing two trainers' graphs bit for
bit: TRAINER's (default train_gpt.py) seeded model with its start-up kernels, looping on, compiled as the trainer
compiles it (dynamic=False, fullgraph=True, cu_seqlens marked dynamic); one micro-batch row of random tokens (16,384 on one GPU) in
documents of random lengths (cu_seqlens as the loader builds them), under the trainer's autocast, run twice. Saves the
loss and every gradient of both runs to SAVE (torch.save); prints the loss in hex and whether run 2 equals run 1.

  TRAINER=X SAVE=a.pt python3 train_graph_check.py          # one trainer
  python3 train_graph_check.py compare a.pt b.pt            # loss and gradients: equal? max |difference|"""
import os, sys, time
from pathlib import Path
import torch

def compare(a_path: str, b_path: str) -> None:
    a, b = torch.load(a_path), torch.load(b_path)
    for run in ("run1", "run2"):
        loss_equal = torch.equal(a[run]["loss"], b[run]["loss"])
        diffs = {k: (a[run]["grads"][k] - b[run]["grads"][k]).abs().max().item() for k in a[run]["grads"]}
        unequal = [k for k in diffs if not torch.equal(a[run]["grads"][k], b[run]["grads"][k])]
        print("%s: loss %s (%s vs %s); gradients equal %d of %d; max |difference| %.3e%s" % (
            run, "equal" if loss_equal else "DIFFERENT", a[run]["loss"].item(), b[run]["loss"].item(),
            len(diffs) - len(unequal), len(diffs), max(diffs.values()), (" in " + ", ".join(unequal[:6])) if unequal else ""))

def main() -> None:
    sys.path.insert(0, str(Path.cwd() / "bench"))
    from harness import configure_kernels, load_trainer, micro_batch_layout
    t0 = time.perf_counter()
    tg = load_trainer(Path(os.environ.get("TRAINER", "train_gpt.py")).resolve())
    h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE="2026-04-27"))
    dist_info = tg.init_distributed({})
    model = tg.build_model(h, dist_info.device)
    print("kernels:", configure_kernels(tg, h, dist_info, model)[0], flush=True)
    model.looping = True
    compiled = torch.compile(model, dynamic=False, fullgraph=True)
    generator = torch.Generator().manual_seed(1234)
    tokens = micro_batch_layout(h, dist_info).local_tokens  # a micro-batch row, as the loader's
    row = torch.randint(2, h.vocab_size, (tokens + 1,), generator=generator)
    row[torch.rand(row.numel(), generator=generator) < 1 / 700] = tg.BOS_ID
    row[0] = tg.BOS_ID
    cu = torch.from_numpy(tg.document_cu_seqlens(row[:-1].numpy(), tg.BOS_ID, h.train_seq_len, tg.CU_SEQLENS_BUCKET))
    x, y, cu = row[None, :-1].to(dist_info.device), row[None, 1:].to(dist_info.device), cu.to(dist_info.device)
    torch._dynamo.mark_dynamic(cu, 0)
    saved = {}
    for run in ("run1", "run2"):
        model.zero_grad(set_to_none=True)
        with tg.autocast_context(dist_info):
            loss = compiled(x, y, cu)
        loss.backward()
        saved[run] = {"loss": loss.detach().float().cpu(), "grads": {k: p.grad.detach().float().cpu()
                      for k, p in model.named_parameters() if p.grad is not None}}
        print("[%6.1f] %s loss %s (%.10f), %d gradients" % (time.perf_counter() - t0, run, loss.float().item().hex(),
              loss.item(), len(saved[run]["grads"])), flush=True)
    same = torch.equal(saved["run1"]["loss"], saved["run2"]["loss"]) and all(
        torch.equal(g, saved["run2"]["grads"][k]) for k, g in saved["run1"]["grads"].items())
    print("run2 equals run1 bit for bit:", same, flush=True)
    torch.save(saved, os.environ["SAVE"])

if __name__ == "__main__":
    compare(*sys.argv[2:4]) if sys.argv[1:2] == ["compare"] else main()
