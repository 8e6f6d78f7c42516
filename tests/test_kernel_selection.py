"""How train_gpt.py chooses, once at start-up, the attention backend and between each fused Triton op and its PyTorch
form (select_kernels: QK_KERNEL, MLP_KERNEL, CE_KERNEL; select_kernel takes the first candidate that runs), the config
errors, and the reasons it logs. The ops themselves: test_qk_kernel.py, test_mlp_kernel.py, test_ce_kernel.py."""
import os

import pytest
import torch

from tgpt_util import tgpt  # noqa: F401  (fixture)

KERNELS = [("QK_KERNEL", "qk"), ("MLP_KERNEL", "mlp"), ("CE_KERNEL", "ce")]


@pytest.mark.parametrize("env_name,part", KERNELS)
def test_choice_and_config_errors_on_cpu(tgpt, env_name, part):
    select, cpu = tgpt.select_kernels, tgpt.init_distributed({})
    assert select(tgpt.Hyperparameters.from_env({}), cpu)[part] == ("torch", "auto; CPU run")
    assert select(tgpt.Hyperparameters.from_env({env_name: "torch"}), cpu)[part] == ("torch", "forced by " + env_name)
    with pytest.raises(tgpt.ConfigError, match="%s='fused': expected one of auto, triton, torch" % env_name):
        tgpt.Hyperparameters.from_env({env_name: "fused"})
    typo = env_name + "S"
    assert any(typo in w and env_name + "?" in w for w in tgpt.suspicious_env_names({typo: "1"}))


def test_attention_on_cpu(tgpt):
    cpu = tgpt.init_distributed({})
    choice = tgpt.select_kernels(tgpt.Hyperparameters.from_env({}), cpu)["attention"]
    assert choice == ("sdpa_cpu", "CPU run: PyTorch SDPA default kernel")
    with pytest.raises(tgpt.ConfigError, match="ATTN_BACKEND=cudnn needs CUDA; this run is on the CPU"):
        tgpt.select_kernels(tgpt.Hyperparameters.from_env({"ATTN_BACKEND": "cudnn"}), cpu)


@pytest.mark.parametrize("env_name,part", KERNELS)
def test_forced_triton_fails_loudly_where_it_cannot_run(tgpt, env_name, part):
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the Triton interpreter makes the kernels runnable on the CPU")
    forced = tgpt.Hyperparameters.from_env({env_name: "triton"})
    with pytest.raises(tgpt.ConfigError, match="%s=triton cannot run here: " % env_name):
        tgpt.select_kernels(forced, tgpt.init_distributed({}))


@pytest.mark.parametrize("env_name,part", KERNELS)
def test_auto_falls_back_to_pytorch_when_the_probe_fails(tgpt, monkeypatch, env_name, part):
    """A CUDA run where the kernel cannot run (here: no GPU at all) gets the PyTorch form and the reason."""
    fake_cuda = tgpt.DistInfo(rank=0, world_size=1, device=torch.device("cuda", 0))
    monkeypatch.setattr(tgpt, "select_attention_backend", lambda h, dist_info: ("sdpa", "test"))
    kernel, reason = tgpt.select_kernels(tgpt.Hyperparameters.from_env({}), fake_cuda)[part]
    assert kernel == "torch" and reason.startswith("auto; triton unavailable (") and len(reason) > 30
