"""Run by tests/test_recipe_0409.py, alone (1 rank) or under torchrun (2 gloo ranks): three optimizer steps of the
tiny 2026-04-09 model (Parallel Muon with MuonEq-R and fp32 work, AdamW) on gradients drawn for 2 ranks; rank r of 2
gets draw r, a single rank their mean. The first step's gradients are 1e-4 times smaller, below GRAD_CLIP_NORM, the
next two far above it, so the weights depend on the clip coefficients themselves (Muon and Adam ignore a common
scale of all steps, not how one step is scaled against another). Clipping as train() does it: GRAD_CLIP_SCOPE=local
clips the local grads before the step, reduced inside it. Rank 0 saves {scope: weights after the steps}, the
initial weights and the mean gradients' norms to argv[1]. Then (for tests/test_optimizer_0427.py) the replicated grads
plus fp32/bf16 tensors at and just past GROUPED_ALL_REDUCE_NUMEL, a draw per rank, averaged by
average_replicated_grads (grouped, as Optimizers.step does) and by one AVG all-reduce per tensor: saved["grouped"]."""
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
limit = tg.GROUPED_ALL_REDUCE_NUMEL
shapes = [tuple(p.shape) for p in optimizers.replicated_params] + [(limit,), (limit + 1,), (3, 5), (limit + 1,)]
dtypes = [torch.float32] * len(optimizers.replicated_params) + [torch.bfloat16] * 3 + [torch.float32]
draws = [(torch.randn((2,) + shape, generator=generator) * 10).to(dtype) for shape, dtype in zip(shapes, dtypes)]
grouped, per_tensor = ([draw[dist_info.rank].clone() for draw in draws] for _ in range(2))
calls, all_reduce = [], torch.distributed.all_reduce
torch.distributed.all_reduce = lambda tensor, *args, **kwargs: calls.append(tensor.numel()) or all_reduce(
    tensor, *args, **kwargs)
tg.average_replicated_grads(grouped, dist_info)
torch.distributed.all_reduce = all_reduce
for grad in per_tensor:
    tg.all_reduce_(grad, dist_info, "avg")
saved["grouped"] = {"grouped": grouped, "per_tensor": per_tensor, "collectives": calls,
                    "mean": [draw.float().mean(0) for draw in draws],
                    "small": [sum(d[0].numel() for d in draws if d.dtype == dtype and d[0].numel() <= limit)
                              for dtype in (torch.float32, torch.bfloat16)]}
if dist_info.is_main:
    torch.save(saved, sys.argv[1])
if dist_info.distributed:  # as main(): both ranks are done before either tears the group down
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()
