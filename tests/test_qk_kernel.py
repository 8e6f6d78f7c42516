"""QK_KERNEL: the fused Triton q/k RMSNorm + partial RoPE (+ q gain, + K's GQA repeat) op of train_gpt.py.
Selection and its errors run everywhere; the kernels themselves run under Triton's CPU interpreter in a child
process (TRITON_INTERPRET must be set before triton is imported), against the PyTorch form they replace."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from tgpt_util import REPO, tgpt  # noqa: F401  (fixture)


def test_qk_kernel_choice_and_config_errors_on_cpu(tgpt):
    cpu = tgpt.init_distributed({})
    assert tgpt.select_qk_kernel(tgpt.Hyperparameters.from_env({}), cpu) == ("torch", "auto; CPU run")
    forced_torch = tgpt.Hyperparameters.from_env({"QK_KERNEL": "torch"})
    assert tgpt.select_qk_kernel(forced_torch, cpu) == ("torch", "forced by QK_KERNEL")
    with pytest.raises(tgpt.ConfigError, match="QK_KERNEL='fused': expected one of auto, triton, torch"):
        tgpt.Hyperparameters.from_env({"QK_KERNEL": "fused"})
    assert any("QK_KERNELS" in w and "QK_KERNEL?" in w for w in tgpt.suspicious_env_names({"QK_KERNELS": "1"}))


def test_forced_triton_fails_loudly_where_it_cannot_run(tgpt):
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the Triton interpreter makes the kernels runnable on the CPU")
    forced = tgpt.Hyperparameters.from_env({"QK_KERNEL": "triton"})
    with pytest.raises(RuntimeError, match="QK_KERNEL=triton cannot run here: "):
        tgpt.select_qk_kernel(forced, tgpt.init_distributed({}))


def test_auto_falls_back_to_pytorch_when_the_probe_fails(tgpt):
    """A CUDA run where the kernel cannot run (here: no GPU at all) gets the PyTorch form and the reason."""
    fake_cuda = tgpt.DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cuda", 0))
    kernel, reason = tgpt.select_qk_kernel(tgpt.Hyperparameters.from_env({}), fake_cuda)
    assert kernel == "torch" and reason.startswith("auto; triton unavailable (") and len(reason) > 30


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
    if importlib.util.find_spec("triton") is None:
        if os.environ.get("REQUIRE_TRITON_TESTS") == "1":
            pytest.fail("REQUIRE_TRITON_TESTS=1 but triton is not installed (.ci/run installs it)")
        pytest.skip("triton is not installed (pip install triton to run the fused-kernel checks on the CPU)")
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "scripts" / "qk_kernel_interpreted.py")],
                          env=dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES=""),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
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
    assert model["grad_names"] and model["num_grads"] >= 30 and model["q_gain_grad"] > 0
    assert model["max_grad_rel"] < 1e-4, model
