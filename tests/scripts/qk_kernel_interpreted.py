"""Run by tests/test_qk_kernel.py with TRITON_INTERPRET=1 (set before triton is imported, so the kernels of
train_gpt.py run on the CPU): the fused q/k op against the PyTorch form, then a tiny GPT step with each path.
Prints one JSON object of largest differences."""
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tgpt_util import compare_tiny_model_step, load_train_gpt  # noqa: E402

tg = load_train_gpt()

op = tg.fused_qk_norm_rope_op()
results = {"op": [], "model": {}}
generator = torch.Generator().manual_seed(0)
# (heads in, repeat, gain, rope_dims, head_dim, seq_len): partial and full RoPE, GQA repeat 1/2/4, a row count
# that is no multiple of the kernel's rows per program, odd head counts
for heads, repeat, with_gain, rope_dims, head_dim, seq_len in (
        (4, 1, True, 8, 16, 10), (2, 2, False, 16, 16, 7), (3, 1, True, 4, 32, 5), (1, 4, False, 32, 32, 9)):
    for dtype in (torch.float32, torch.bfloat16):
        x = (torch.randn(2, seq_len, heads * head_dim, generator=generator) * 3).to(dtype)
        x = x.view(2, seq_len, heads, head_dim).requires_grad_()
        gain = (torch.rand(heads, generator=generator) + 0.5).requires_grad_() if with_gain else None
        cos_full, sin_full, swap = tg.rotary_tables(seq_len, head_dim, rope_dims, 10000.0, "cpu", dtype)
        # the reference in fp32 from the same inputs, with the norm rounded to dtype as the compiled form does
        norm = tg.rms_norm(x.float())
        norm = norm + (norm.to(dtype).float() - norm).detach()  # value rounded to dtype, gradient exact
        ref = tg.apply_partial_rotary(norm, cos_full.float(), sin_full.float(), swap)
        gain_used = gain.to(dtype) if with_gain else None
        if with_gain:
            ref = ref * gain_used.float()[None, None, :, None]
        ref = ref.repeat_interleave(repeat, dim=2)
        out = op(x, cos_full, sin_full, gain_used, rope_dims, repeat)
        # upstream gradient in SDPA's (B, H, T, D) layout: a non-contiguous view for the kernel
        grad = torch.randn(2, heads * repeat, seq_len, head_dim, generator=generator).to(dtype).transpose(1, 2)
        inputs = [x] + ([gain] if with_gain else [])
        got = torch.autograd.grad(out, inputs, grad)
        want = torch.autograd.grad(ref, inputs, grad.float())
        # largest difference relative to the largest reference value: forward, dx, dgain
        relative = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                    for a, b in zip((out,) + got, (ref,) + want)]
        results["op"].append({"case": [heads, repeat, with_gain, rope_dims, head_dim, seq_len, str(dtype)],
                              "shape": list(out.shape), "relative": relative})

# one tiny-model step (fp32): loss and every gradient, Triton path vs PyTorch path, same weights and tokens
results["model"] = compare_tiny_model_step(tg, lambda model: model.set_attention_backend("sdpa_cpu", "torch"),
                                           lambda model: model.set_attention_backend("sdpa_cpu", "triton"))
print(json.dumps(results))
