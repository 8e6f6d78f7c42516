"""Run by tests/test_mlp_kernel.py with TRITON_INTERPRET=1 (set before triton is imported, so the kernels of
train_gpt.py run on the CPU): the fused MLP op against the PyTorch form in fp32, then a tiny GPT step with each
path. Prints one JSON object of largest differences. (bf16 is not checked here: Triton 3.7's interpreter
computes tl.dot on bf16 operands wrongly; the GPU start-up probe and bench/mlp_kernel.py check bf16.)"""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tgpt_util import TINY_0409_ENV, TINY_0427_ENV, compare_tiny_model_step, load_train_gpt  # noqa: E402

tg = load_train_gpt()
op = tg.fused_mlp_op()
SHIPPED_LAUNCH = dict(tg.MLP_UP_LAUNCH)
results = {"op": [], "no_grad": [], "frozen": {}, "model": {}}
generator = torch.Generator().manual_seed(0)


def relative(got, want) -> float:
    return ((got - want).abs().max() / want.abs().max()).item()


# (rows as (batch, seq), d, hidden, launch): edge tiles in both directions (37 and 74 rows, hidden 96 with
# BLOCK_N 64), several K steps (d 64 with BLOCK_K 16), GROUP_M larger and smaller than the row tiles, one program
# per tile and programs striding over the tiles (PROGRAMS_PER_SM counts programs in all on the CPU); last, the
# 2026-04-09 model's widths (d 512, hidden 2048) with the shipped launch configuration
for (batch, seq), dim, hidden_dim, launch in (
        ((2, 37), 32, 96, (16, 64, 16, 2, 0)), ((1, 74), 64, 192, (32, 32, 16, 8, 5)),
        ((3, 8), 16, 48, (16, 16, 16, 1, 2)), ((1, 200), 512, 2048, SHIPPED_LAUNCH)):
    if not isinstance(launch, dict):
        launch = dict(zip(("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "PROGRAMS_PER_SM"), launch), num_warps=4,
                      num_stages=2)
    tg.MLP_UP_LAUNCH, tg.MLP_DOWN_LAUNCH = launch, dict(launch)
    x = torch.randn(batch, seq, dim, generator=generator).requires_grad_()
    w_up = (torch.randn(hidden_dim, dim, generator=generator) * dim ** -0.5).requires_grad_()
    w_down = (torch.randn(dim, hidden_dim, generator=generator) * hidden_dim ** -0.5).requires_grad_()
    grad = torch.randn(batch, seq, dim, generator=generator)
    inputs = (x, w_up, w_down)
    out = op(*inputs)
    got = torch.autograd.grad(out, inputs, grad)
    ref = tg.leaky_relu_sq_mlp(*inputs)
    want = torch.autograd.grad(ref, inputs, grad)
    results["op"].append({"shape": list(out.shape), "want_shape": list(ref.shape),
                          "relative": [relative(a, b) for a, b in zip((out,) + got, (ref,) + want)]})
    with torch.no_grad():  # inference: the op skips writing the pre-activation
        results["no_grad"].append(relative(op(*inputs), ref.detach()))

# frozen weights (TTT freezes blocks): the backward skips the weight GEMMs and dx is still right
tg.MLP_UP_LAUNCH = tg.MLP_DOWN_LAUNCH = dict(BLOCK_M=16, BLOCK_N=32, BLOCK_K=16, GROUP_M=2, num_warps=4,
                                             num_stages=2, PROGRAMS_PER_SM=0)
x = torch.randn(2, 5, 32, generator=generator).requires_grad_()
w_up, w_down = torch.randn(96, 32, generator=generator) / 6, torch.randn(32, 96, generator=generator) / 10
dx = torch.autograd.grad(op(x, w_up, w_down).square().sum(), x)[0]
want = torch.autograd.grad(tg.leaky_relu_sq_mlp(x, w_up, w_down).square().sum(), x)[0]
results["frozen"] = {"dx": relative(dx, want)}

# one tiny-model step (fp32): loss and every gradient, Triton MLP vs PyTorch MLP, same weights and tokens
results["model"] = compare_tiny_model_step(tg, lambda model: tg.use_kernels(model, "sdpa_cpu", mlp="torch"),
                                           lambda model: tg.use_kernels(model, "sdpa_cpu", mlp="triton"))


def looped(mlp):  # the tiny 2026-04-09 model, looping on: looped and parallel-residual blocks
    def configure(model):
        tg.use_kernels(model, "sdpa_cpu", mlp=mlp)
        model.looping = True
    return configure


env_0409 = dict(TINY_0409_ENV, TRAIN_SEQ_LEN="16", EVAL_SEQ_LEN="16", EVAL_STRIDE="8")
results["model_0409"] = compare_tiny_model_step(tg, looped("torch"), looped("triton"), env=env_0409)
env_0427 = dict(TINY_0427_ENV, TRAIN_SEQ_LEN="16", EVAL_SEQ_LEN="16", EVAL_STRIDE="8",
               TTT_LORA_CHUNK="16")  # gates and two lanes
results["model_0427"] = compare_tiny_model_step(tg, looped("torch"), looped("triton"), env=env_0427)
print(json.dumps(results))
