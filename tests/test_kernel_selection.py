"""QK_KERNEL and MLP_KERNEL: how train_gpt.py chooses between a fused Triton op and the PyTorch form (select_kernel),
the config errors, and the reasons it logs. The ops themselves are tested in test_qk_kernel.py / test_mlp_kernel.py."""
import os

import pytest
import torch

from tgpt_util import tgpt  # noqa: F401  (fixture)

KERNELS = [("QK_KERNEL", "select_qk_kernel"), ("MLP_KERNEL", "select_mlp_kernel")]


@pytest.mark.parametrize("env_name,selector", KERNELS)
def test_choice_and_config_errors_on_cpu(tgpt, env_name, selector):
    select, cpu = getattr(tgpt, selector), tgpt.init_distributed({})
    assert select(tgpt.Hyperparameters.from_env({}), cpu) == ("torch", "auto; CPU run")
    assert select(tgpt.Hyperparameters.from_env({env_name: "torch"}), cpu) == ("torch", "forced by " + env_name)
    with pytest.raises(tgpt.ConfigError, match="%s='fused': expected one of auto, triton, torch" % env_name):
        tgpt.Hyperparameters.from_env({env_name: "fused"})
    typo = env_name + "S"
    assert any(typo in w and env_name + "?" in w for w in tgpt.suspicious_env_names({typo: "1"}))


@pytest.mark.parametrize("env_name,selector", KERNELS)
def test_forced_triton_fails_loudly_where_it_cannot_run(tgpt, env_name, selector):
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("the Triton interpreter makes the kernels runnable on the CPU")
    forced = tgpt.Hyperparameters.from_env({env_name: "triton"})
    with pytest.raises(RuntimeError, match="%s=triton cannot run here: " % env_name):
        getattr(tgpt, selector)(forced, tgpt.init_distributed({}))


@pytest.mark.parametrize("env_name,selector", KERNELS)
def test_auto_falls_back_to_pytorch_when_the_probe_fails(tgpt, env_name, selector):
    """A CUDA run where the kernel cannot run (here: no GPU at all) gets the PyTorch form and the reason."""
    fake_cuda = tgpt.DistInfo(rank=0, world_size=1, local_rank=0, device=torch.device("cuda", 0))
    kernel, reason = getattr(tgpt, selector)(tgpt.Hyperparameters.from_env({}), fake_cuda)
    assert kernel == "torch" and reason.startswith("auto; triton unavailable (") and len(reason) > 30
