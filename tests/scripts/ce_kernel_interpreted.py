"""Run by tests/test_ce_kernel.py with TRITON_INTERPRET=1 (set before triton is imported, so the kernels of
train_gpt.py run on the CPU): the fused softcapped cross-entropy op against F.cross_entropy of the softcapped logits,
then a tiny GPT step with each path. Prints one JSON object of largest differences."""
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tgpt_util import TINY_0427_ENV, compare_tiny_model_step, load_train_gpt  # noqa: E402

tg = load_train_gpt()
op = tg.fused_ce_op()
results = {"op": [], "model": {}}
generator = torch.Generator().manual_seed(0)
# (rows, vocab, softcap, logit scale): vocab below, at, and not a multiple of the 1024-column block (3 blocks, the
# last one partial); logits from small to far past the softcap (the tanh saturates); one row
for rows, vocab, softcap, scale in ((5, 1000, 30.0, 1.0), (3, 1024, 30.0, 30.0), (7, 2500, 30.0, 100.0),
                                    (1, 3000, 15.0, 10.0)):
    for dtype in (torch.float32, torch.bfloat16):
        logits = (torch.randn(rows, vocab, generator=generator) * scale).to(dtype).requires_grad_()
        targets = torch.randint(vocab, (rows,), generator=generator)
        targets[0] = vocab - 1  # the last column of the last (partial) block
        grad = torch.randn(rows, generator=generator)
        losses = op(logits, targets, softcap)
        want = F.cross_entropy(softcap * torch.tanh(logits.float() / softcap), targets, reduction="none")
        got_dx, want_dx = (torch.autograd.grad(loss, logits, grad)[0] for loss in (losses, want))
        mean = op(logits, targets, softcap).mean()  # the training loss: the mean over rows
        got_mean_dx, want_mean_dx = (torch.autograd.grad(loss, logits)[0] for loss in (
            mean, F.cross_entropy(softcap * torch.tanh(logits.float() / softcap), targets)))
        results["op"].append({
            "case": [rows, vocab, str(dtype)], "dtypes": [str(losses.dtype), str(got_dx.dtype)],
            "loss": ((losses - want).abs().max() / want.abs().max()).item(),
            "dx": ((got_dx.float() - want_dx.float()).abs().max() / want_dx.float().abs().max()).item(),
            "mean": abs(mean.item() - want.mean().item()) / want.mean().item(),
            "mean_dx": ((got_mean_dx.float() - want_mean_dx.float()).abs().max()
                        / want_mean_dx.float().abs().max()).item()})

# the start-up probe (a vocabulary of 2 blocks and a partial one); it raises if the op differs from the PyTorch form
tg._probe_ce_kernel(2500, 30.0, torch.device("cpu"))
results["probe"] = "passed"


def kernels(ce):  # the tiny 2026-04-27 model, looping on
    def configure(model):
        tg.use_kernels(model, "sdpa_cpu", ce=ce)
        model.looping = True
    return configure


# one fp32 training step of the model with each loss (GPT.forward's dispatch: logits before the softcap, the mean)
env_0427 = dict(TINY_0427_ENV, TRAIN_SEQ_LEN="16", EVAL_SEQ_LEN="16", EVAL_STRIDE="8", TTT_LORA_CHUNK="16")
results["model_0427"] = compare_tiny_model_step(tg, kernels("torch"), kernels("triton"), env=env_0427)
print(json.dumps(results))
