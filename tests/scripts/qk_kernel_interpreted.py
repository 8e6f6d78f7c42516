"""Run by tests/test_qk_kernel.py with TRITON_INTERPRET=1 (set before triton is imported, so the kernels of
train_gpt.py run on the CPU): the fused q/k/v op against the PyTorch form, then a tiny GPT step with each path.
Prints one JSON object of largest differences."""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tgpt_util import compare_tiny_model_step, load_train_gpt  # noqa: E402

tg = load_train_gpt()

op = tg.fused_qkv_heads_op()
results = {"op": [], "model": {}}
generator = torch.Generator().manual_seed(0)
# (heads, kv heads, repeat, value embedding, rope_dims, head_dim, seq_len): partial and full RoPE, GQA repeat 1/2/4,
# a row count that is no multiple of the kernel's rows per program, odd head counts
for heads, kv_heads, repeat, with_ve, rope_dims, head_dim, seq_len in (
        (4, 2, 2, True, 8, 16, 10), (2, 2, 1, False, 16, 16, 7), (3, 3, 1, True, 4, 32, 5),
        (4, 1, 4, False, 32, 32, 9)):
    for dtype in (torch.float32, torch.bfloat16):
        width = (heads + 2 * kv_heads) * head_dim
        qkv = (torch.randn(2, seq_len, width, generator=generator) * 3).to(dtype).requires_grad_()
        ve = torch.randn(2, seq_len, kv_heads * head_dim, generator=generator).to(dtype).requires_grad_() \
            if with_ve else None
        gain = (torch.rand(heads, generator=generator) + 0.5).to(dtype).requires_grad_()
        cos_full, sin_full, swap = tg.rotary_tables(seq_len, head_dim, rope_dims, 10000.0, "cpu", dtype)
        out = op(qkv, ve, cos_full, sin_full, gain, heads, rope_dims, repeat)
        # the reference in fp32 from the same inputs
        ref = tg.qkv_heads(qkv.float(), ve.float() if with_ve else None, cos_full.float(), sin_full.float(), swap,
                           gain.float(), heads, rope_dims, repeat)
        # upstream gradients in SDPA's (B, H, T, D) layout: non-contiguous views for the kernel
        grads = [torch.randn(2, t.size(2), seq_len, head_dim, generator=generator).to(dtype).transpose(1, 2)
                 for t in out]
        inputs = [qkv, gain] + ([ve] if with_ve else [])
        got = torch.autograd.grad(out, inputs, grads)
        want = torch.autograd.grad(ref, inputs, [g.float() for g in grads])
        # largest difference relative to the largest reference value: q, k, v, d_qkv, d_gain, d_value_embed
        relative = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                    for a, b in zip(out + got, ref + want)]
        results["op"].append({"case": [heads, kv_heads, repeat, with_ve, rope_dims, head_dim, seq_len, str(dtype)],
                              "shapes": [list(t.shape) for t in out], "relative": relative})

# one tiny-model step (fp32): loss and every gradient, Triton path vs PyTorch path, same weights and tokens
results["model"] = compare_tiny_model_step(tg, lambda model: model.set_attention_backend("sdpa_cpu", "torch"),
                                           lambda model: model.set_attention_backend("sdpa_cpu", "triton"))
print(json.dumps(results))
