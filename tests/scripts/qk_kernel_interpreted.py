"""Run by tests/test_qk_kernel.py with TRITON_INTERPRET=1 (set before triton is imported, so the kernels of
train_gpt.py run on the CPU): the fused q/k/v and XSA ops against the PyTorch form, then a tiny GPT step with each path.
Prints one JSON object of largest differences."""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tgpt_util import TINY_0409_ENV, TINY_0427_ENV, compare_tiny_model_step, load_train_gpt  # noqa: E402

tg = load_train_gpt()

op = tg.fused_qkv_heads_op()
results = {"op": [], "model": {}}
generator = torch.Generator().manual_seed(0)
# (heads, kv heads, repeat, value embedding, unrepeated v too, rope_dims, head_dim, seq_len): partial and full RoPE,
# GQA repeat 1/2/4, a row count that is no multiple of the kernel's rows per program, odd head counts
for heads, kv_heads, repeat, with_ve, plain_v, rope_dims, head_dim, seq_len in (
        (4, 2, 2, True, True, 8, 16, 10), (2, 2, 1, False, False, 16, 16, 7), (3, 3, 1, True, False, 4, 32, 5),
        (4, 1, 4, False, True, 32, 32, 9)):
    for dtype in (torch.float32, torch.bfloat16):
        width = (heads + 2 * kv_heads) * head_dim
        qkv = (torch.randn(2, seq_len, width, generator=generator) * 3).to(dtype).requires_grad_()
        ve = torch.randn(2, seq_len, kv_heads * head_dim, generator=generator).to(dtype).requires_grad_() \
            if with_ve else None
        gain = (torch.rand(heads, generator=generator) + 0.5).to(dtype).requires_grad_()
        cos_full, sin_full, swap = tg.rotary_tables(seq_len, head_dim, rope_dims, 10000.0, "cpu", dtype)
        out = op(qkv, ve, cos_full, sin_full, gain, heads, rope_dims, repeat, plain_v)
        # the reference in fp32 from the same inputs
        ref = tg.qkv_heads(qkv.float(), ve.float() if with_ve else None, cos_full.float(), sin_full.float(), swap,
                           gain.float(), heads, rope_dims, repeat, plain_v)
        shapes = [list(t.shape) for t in out]
        if not plain_v:  # the fourth output is empty
            out, ref = out[:3], ref[:3]
        # upstream gradients in SDPA's (B, H, T, D) layout: non-contiguous views for the kernel; the unrepeated v's
        # (XSA's) contiguous
        grads = [torch.randn(2, t.size(2), seq_len, head_dim, generator=generator).to(dtype).transpose(1, 2)
                 for t in out[:3]] + [torch.randn(t.shape, generator=generator).to(dtype) for t in out[3:]]
        inputs = [qkv, gain] + ([ve] if with_ve else [])
        got = torch.autograd.grad(out, inputs, grads)
        want = torch.autograd.grad(ref, inputs, [g.float() for g in grads])
        # largest difference relative to the largest reference value: q, k, v, [v unrepeated], d_qkv, d_gain,
        # [d_value_embed]
        relative = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                    for a, b in zip(out + got, ref + want)]
        results["op"].append({"case": [heads, kv_heads, repeat, with_ve, plain_v, rope_dims, head_dim, seq_len,
                                       str(dtype)], "shapes": shapes, "relative": relative})

# XSA: (heads, value heads, head_dim, seq_len): group 1 (V repeated, the record's path), 2 and 4; row counts that are
# no multiple of the rows per program; y and the upstream gradient as non-contiguous views; one value row of zeros
# and one of norm below F.normalize's eps (1e-12), where the norm's gradient is masked off
xsa = tg.fused_xsa_op()
results["xsa"] = []
for heads, v_heads, head_dim, seq_len in ((4, 4, 16, 9), (4, 2, 32, 7), (8, 2, 16, 5)):
    for dtype in (torch.float32, torch.bfloat16):
        # y as a (B, H, T, D) tensor seen as (B, T, H, D), like SDPA's output: read through its strides
        y = torch.randn(2, heads, seq_len, head_dim, generator=generator).to(dtype).transpose(1, 2)
        y.requires_grad_()
        v = torch.randn(2, seq_len, v_heads, head_dim, generator=generator)
        v[0, 1, 0] = 0.0
        v[1, 2, -1] = 1e-14
        v = (v * 2).to(dtype).requires_grad_()
        grad = torch.randn(2, heads, seq_len, head_dim, generator=generator).to(dtype).transpose(1, 2)
        out = xsa(y, v)
        results.setdefault("xsa_strides", []).append([list(out.stride()), list(y.stride())])
        ref = tg.exclusive_self_attention(y.float(), v.float())
        got = torch.autograd.grad(out, (y, v), grad)
        want = torch.autograd.grad(ref, (y, v), grad.float())
        relative = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                    for a, b in zip((out,) + got, (ref,) + want)]
        results["xsa"].append({"case": [heads, v_heads, head_dim, seq_len, str(dtype)], "relative": relative,
                               "finite": all(bool(t.float().isfinite().all()) for t in (out,) + got),
                               "zero_row_dv": got[1][0, 1, 0].abs().max().item()})

# one tiny-model step (fp32): loss and every gradient, Triton path vs PyTorch path, same weights and tokens
results["model"] = compare_tiny_model_step(tg, lambda model: tg.use_kernels(model, "sdpa_cpu", qk="torch"),
                                           lambda model: tg.use_kernels(model, "sdpa_cpu", qk="triton"))

# the start-up probe at the 2026-04-09 model's shapes (8 query / 4 KV heads of 64, RoPE on 16 dims), with the GQA
# repeat of FA3 (1) and of SDPA (2); it raises if the ops differ from the PyTorch form
for repeat in (1, 2):
    tg._probe_qk_kernel(64, 16, torch.device("cpu"), 8, 4, repeat)
results["probe_0409"] = "passed"


def looped(qk):  # the tiny 2026-04-09 model, looping on: looped and parallel-residual blocks, XSA in all
    def configure(model):
        tg.use_kernels(model, "sdpa_cpu", qk=qk)
        model.looping = True
    return configure


env_0409 = dict(TINY_0409_ENV, TRAIN_SEQ_LEN="16", EVAL_SEQ_LEN="16", EVAL_STRIDE="8")
results["model_0409"] = compare_tiny_model_step(tg, looped("torch"), looped("triton"), env=env_0409)
env_0427 = dict(TINY_0427_ENV, TRAIN_SEQ_LEN="16", EVAL_SEQ_LEN="16", EVAL_STRIDE="8",
               TTT_LORA_CHUNK="16")  # gates and two lanes
results["model_0427"] = compare_tiny_model_step(tg, looped("torch"), looped("triton"), env=env_0427)
print(json.dumps(results))
