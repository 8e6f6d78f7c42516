"""Run by tests/test_recipe_0409.py, alone (1 rank) or under torchrun (2 gloo ranks): three optimizer steps of the
tiny 2026-04-09 model (Parallel Muon with MuonEq-R and fp32 work, AdamW) on gradients drawn for 2 ranks; rank r of 2
gets draw r, a single rank their mean. The first step's gradients are 1e-4 times smaller, below GRAD_CLIP_NORM, the
next two far above it, so the weights depend on the clip coefficients themselves (Muon and Adam ignore a common
scale of all steps, not how one step is scaled against another). Clipping as train() does it: GRAD_CLIP_SCOPE=local
clips the local grads before the step, reduced inside it. Rank 0 saves {scope: weights after the steps}, the
initial weights and the mean gradients' norms to argv[1]."""
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tgpt_util import TINY_0409_ENV, load_train_gpt  # noqa: E402

tg = load_train_gpt()
dist_info = tg.init_distributed(os.environ)
saved = {"norms": []}
for scope in ("reduced", "local"):
    h = tg.Hyperparameters.from_env(dict(TINY_0409_ENV, GRAD_CLIP_SCOPE=scope))
    model = tg.build_model(h, dist_info.device)
    saved["initial"] = {k: v.clone() for k, v in model.state_dict().items()}
    optimizers = tg.Optimizers(h, model, dist_info)
    generator = torch.Generator().manual_seed(0)
    for step, scale in enumerate((1e-4, 1.0, 1.0)):
        for param in model.parameters():
            draws = torch.randn((2,) + tuple(param.shape), generator=generator) * scale
            param.grad = draws[dist_info.rank] if dist_info.world_size == 2 else draws.mean(0)
            if scope == "reduced":
                saved["norms"].append(draws.mean(0).square().sum())
        if scope == "local":
            torch.nn.utils.clip_grad_norm_(model.parameters(), h.grad_clip_norm)
        optimizers.set_schedule(1.0, tg.muon_momentum_at(h, step))
        optimizers.step()
        optimizers.zero_grad()
    saved[scope] = {k: v.clone() for k, v in model.state_dict().items()}
saved["norms"] = torch.stack(saved["norms"]).view(3, -1).sum(1).sqrt().tolist()
if dist_info.is_main:
    torch.save(saved, sys.argv[1])
if dist_info.distributed:  # as main(): both ranks are done before either tears the group down
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
