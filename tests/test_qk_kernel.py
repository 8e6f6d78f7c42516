"""QK_KERNEL: the fused Triton q/k RMSNorm + partial RoPE (+ q gain, + K's GQA repeat) op of train_gpt.py.
The start-up probe's checks run everywhere; the kernels themselves run under Triton's CPU interpreter in a child
process (TRITON_INTERPRET must be set before triton is imported), against the PyTorch form they replace. Selection
and its errors: test_kernel_selection.py."""
import pytest
import torch

from tgpt_util import run_under_triton_interpreter, tgpt  # noqa: F401  (fixture)


def test_probe_rejects_a_kernel_that_computes_something_else(tgpt, monkeypatch):
    """The start-up probe compares forward and both gradients with the PyTorch form: RMSNorm without the RoPE
    (right shapes, right gain, right repeat) must be refused, naming what differs."""
    def norm_without_rope(x, cos_full, sin_full, gain, rope_dims, repeat):
        y = tgpt.rms_norm(x) * (gain[:, None] if gain is not None else 1.0)
        return y.repeat_interleave(repeat, dim=2)
    monkeypatch.setattr(tgpt, "fused_qk_norm_rope_op", lambda: norm_without_rope)
    with pytest.raises(RuntimeError, match="fused q/k kernel differs from the PyTorch form: forward max error"):
        tgpt._probe_qk_kernel(16, 8, torch.device("cpu"))

    def pytorch_form(x, cos_full, sin_full, gain, rope_dims, repeat):
        swap = tgpt.rotary_tables(x.size(1), x.size(-1), rope_dims, 10000.0, x.device, x.dtype)[2]
        return tgpt.qk_norm_rope(x, cos_full, sin_full, swap, gain, repeat)
    monkeypatch.setattr(tgpt, "fused_qk_norm_rope_op", lambda: pytorch_form)
    tgpt._probe_qk_kernel(16, 8, torch.device("cpu"))  # the PyTorch form itself passes


def test_fused_kernels_match_the_pytorch_form_under_the_triton_interpreter():
    results = run_under_triton_interpreter("qk_kernel_interpreted.py")
    assert len(results["op"]) == 8
    for case in results["op"]:
        forward, dx, *dgain = case["relative"]
        heads, repeat, with_gain, _, head_dim, seq_len, dtype = case["case"]
        assert case["shape"] == [2, seq_len, heads * repeat, head_dim] and len(dgain) == int(with_gain)
        if dtype == "torch.float32":
            assert max([forward, dx] + dgain) < 1e-5, case
        else:  # one rounding of the norm to bf16 before RoPE, like the compiled form; then the output rounding
            assert forward <= 2.0 ** -6 and dx <= 2.0 ** -7 and all(g <= 2.0 ** -6 for g in dgain), case
    model = results["model"]
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6)
    assert model["grad_names"] and model["num_grads"] >= 30 and model["grad_max"]["blocks.0.attn.q_gain"] > 0
    assert model["max_grad_rel"] < 1e-4, model
