"""QK_KERNEL: the fused Triton op of train_gpt.py that turns the one q/k/v projection into the attention inputs (q/k
RMSNorm + partial RoPE, q gain, value embedding, the GQA repeat of K and V).
The start-up probe's checks run everywhere; the kernels themselves run under Triton's CPU interpreter in a child
process (TRITON_INTERPRET must be set before triton is imported), against the PyTorch form they replace. Selection
and its errors: test_kernel_selection.py."""
import pytest
import torch

from tgpt_util import run_under_triton_interpreter, tgpt  # noqa: F401  (fixture)


def test_probe_rejects_an_op_that_computes_something_else(tgpt, monkeypatch):
    """The start-up probe compares all three outputs and the three gradients with the PyTorch form: the right q and k
    with the value embedding added twice to v must be refused, naming what differs; the PyTorch form itself passes.
    Then the XSA op: one that leaves every other head of a group alone is refused."""
    def value_embed_twice(qkv, value_embed, cos_full, sin_full, gain, num_heads, rope_dims, repeat, plain_v):
        swap = tgpt.rotary_tables(qkv.size(1), cos_full.size(1), rope_dims, 10000.0, qkv.device, qkv.dtype)[2]
        return tgpt.qkv_heads(qkv, 2 * value_embed, cos_full, sin_full, swap, gain, num_heads, rope_dims, repeat,
                              plain_v)
    monkeypatch.setattr(tgpt, "fused_qkv_heads_op", lambda: value_embed_twice)
    with pytest.raises(RuntimeError, match="fused q/k/v op differs from the PyTorch form: v max error"):
        tgpt._probe_qk_kernel(16, 8, torch.device("cpu"), 2, 1, 2)

    def pytorch_form(qkv, value_embed, cos_full, sin_full, gain, num_heads, rope_dims, repeat, plain_v):
        swap = tgpt.rotary_tables(qkv.size(1), cos_full.size(1), rope_dims, 10000.0, qkv.device, qkv.dtype)[2]
        return tgpt.qkv_heads(qkv, value_embed, cos_full, sin_full, swap, gain, num_heads, rope_dims, repeat,
                              plain_v)
    monkeypatch.setattr(tgpt, "fused_qkv_heads_op", lambda: pytorch_form)
    monkeypatch.setattr(tgpt, "fused_xsa_op", lambda: tgpt.exclusive_self_attention)
    tgpt._probe_qk_kernel(16, 8, torch.device("cpu"), 2, 1, 2)

    def xsa_per_value_head_only(y, v):  # the second head of each group left untouched
        out = tgpt.exclusive_self_attention(y, v)
        return torch.stack((out[:, :, 0::2], y[:, :, 1::2]), dim=3).flatten(2, 3)
    monkeypatch.setattr(tgpt, "fused_xsa_op", lambda: xsa_per_value_head_only)
    with pytest.raises(RuntimeError, match="fused XSA op differs from the PyTorch form: forward max error"):
        tgpt._probe_qk_kernel(16, 8, torch.device("cpu"), 2, 1, 2)


def test_fused_kernels_match_the_pytorch_form_under_the_triton_interpreter():
    results = run_under_triton_interpreter("qk_kernel_interpreted.py")
    assert len(results["op"]) == 8
    for case in results["op"]:
        heads, kv_heads, repeat, with_ve, plain_v, _, head_dim, seq_len, dtype = case["case"]
        assert case["shapes"] == [[2, seq_len, heads, head_dim]] + [[2, seq_len, kv_heads * repeat, head_dim]] * 2 \
            + [[2, seq_len, kv_heads, head_dim] if plain_v else [0]]
        errors = case["relative"]
        q, k, v, v_plain = errors[:3] + errors[3:4] * plain_v + [0.0] * (not plain_v)
        d_qkv, d_gain, *d_ve = errors[3 + plain_v:]
        assert len(d_ve) == int(with_ve)
        if dtype == "torch.float32":
            assert max([q, k, v, v_plain, d_qkv, d_gain] + d_ve) < 1e-5, case
        else:  # one rounding of the norm to bf16 before RoPE, like the compiled form; then the output rounding
            assert max([q, k, v, v_plain, d_gain] + d_ve) <= 2.0 ** -6 and d_qkv <= 2.0 ** -7, case
    assert len(results["xsa"]) == 6
    assert all(out == y for out, y in results["xsa_strides"])  # the output keeps y's layout (no copy)
    for case in results["xsa"]:
        assert case["finite"], case
        *_, dtype = case["case"]
        # bf16: the output's rounding (the reference is fp32 from the same bf16 inputs)
        assert max(case["relative"]) < (1e-5 if dtype == "torch.float32" else 2.0 ** -7), case
    model = results["model"]
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6)
    assert model["grad_names"] and model["num_grads"] >= 30 and model["grad_max"]["blocks.0.attn.q_gain"] > 0
    assert model["grad_max"]["ve_shared.embed.weight"] > 0
    assert model["max_grad_rel"] < 1e-4, model
    assert results["probe_0409"] == "passed"
    model = results["model_0409"]  # RECIPE=2026-04-09, looped
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6) and model["grad_max"]["skip_gates"] > 0
    assert model["max_grad_rel"] < 1e-4, model
    model = results["model_0427"]  # RECIPE=2026-04-27, looped: sparse gate, SmearGate, two lanes
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6) and model["max_grad_rel"] < 1e-4, model
    assert min(model["grad_max"][name] for name in ("blocks.5.attn.attn_gate_w", "smear_lambda",
                                                     "parallel_post_lambdas", "parallel_resid_lambdas")) > 0
