"""MLP_KERNEL: the fused Triton MLP op of train_gpt.py (LeakyReLU(0.5)^2 inside the up-projection GEMM's
epilogue, its derivative inside the backward d_act GEMM's). The start-up probe, the shape condition and the launch
grid run everywhere; the kernels themselves run under Triton's CPU interpreter in a child process (TRITON_INTERPRET
must be set before triton is imported), against the PyTorch form they replace. Selection: test_kernel_selection.py."""
import pytest
import torch

from tgpt_util import require_triton, run_under_triton_interpreter, tgpt  # noqa: F401  (fixture)


class _WrongSlopeBackward(torch.autograd.Function):
    """The right forward with a backward that forgets the negative slope (2h everywhere)."""

    @staticmethod
    def forward(ctx, x, w_up, w_down):
        ctx.save_for_backward(x, w_up, w_down)
        return torch.nn.functional.leaky_relu(x @ w_up.t(), 0.5).square() @ w_down.t()

    @staticmethod
    def backward(ctx, grad):
        x, w_up, w_down = ctx.saved_tensors
        h = x @ w_up.t()
        d_hidden = (grad @ w_down) * 2 * h
        rows = lambda t: t.reshape(-1, t.size(-1))  # noqa: E731
        act = torch.nn.functional.leaky_relu(h, 0.5).square()
        return d_hidden @ w_up, rows(d_hidden).t() @ rows(x), rows(grad).t() @ rows(act)


def test_probe_rejects_a_kernel_that_computes_something_else(tgpt, monkeypatch):
    """The start-up probe compares the forward and all three gradients with the PyTorch form: ReLU^2 instead of
    LeakyReLU(0.5)^2 fails in the forward; the right forward with a wrong backward fails in dx."""
    relu_squared = lambda x, w_up, w_down: torch.relu(x @ w_up.t()).square() @ w_down.t()  # noqa: E731
    monkeypatch.setattr(tgpt, "fused_mlp_op", lambda: relu_squared)
    with pytest.raises(RuntimeError, match="fused MLP kernel differs from the PyTorch form: forward max error"):
        tgpt._probe_mlp_kernel(64, torch.device("cpu"), 192)
    monkeypatch.setattr(tgpt, "fused_mlp_op", lambda: _WrongSlopeBackward.apply)
    with pytest.raises(RuntimeError, match="fused MLP kernel differs from the PyTorch form: dx max error"):
        tgpt._probe_mlp_kernel(64, torch.device("cpu"), 192)
    monkeypatch.setattr(tgpt, "fused_mlp_op", lambda: tgpt.leaky_relu_sq_mlp)
    tgpt._probe_mlp_kernel(64, torch.device("cpu"), 192)  # the PyTorch form itself passes


def test_launch_checks_name_the_problem(tgpt):
    require_triton()
    h = tgpt.Hyperparameters.from_env({"MODEL_DIM": "48", "NUM_HEADS": "3", "NUM_KV_HEADS": "1",
                                       "MLP_KERNEL": "triton"})
    with pytest.raises(ValueError, match="model_dim=48 is not a multiple of BLOCK_K=64"):
        tgpt.select_kernels(h, tgpt.init_distributed({}))
    grid, meta = tgpt._mlp_launch(dict(tgpt.MLP_UP_LAUNCH, PROGRAMS_PER_SM=0), torch.zeros(300, 64), 96)
    tiles_m, tiles_n = -(-300 // meta["BLOCK_M"]), -(-96 // meta["BLOCK_N"])
    assert grid == (tiles_m * tiles_n,) and meta["PRECISION"] == "ieee" and "PROGRAMS_PER_SM" not in meta


def test_fused_kernels_match_the_pytorch_form_under_the_triton_interpreter():
    results = run_under_triton_interpreter("mlp_kernel_interpreted.py")
    assert len(results["op"]) == 4 and len(results["no_grad"]) == 4
    for case in results["op"]:  # fp32 in, full-precision dots: forward, dx, dw_up, dw_down all but equal
        assert case["shape"] == case["want_shape"] and max(case["relative"]) < 1e-5, case
    assert max(results["no_grad"]) < 1e-5
    assert results["frozen"]["dx"] < 1e-5
    model = results["model"]
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6)
    assert model["grad_names"] and model["num_grads"] >= 30 and model["grad_max"]["mlp_up_bank"] > 0
    assert model["max_grad_rel"] < 1e-4, model
    model = results["model_0409"]  # RECIPE=2026-04-09, looped
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6) and model["grad_max"]["skip_gates"] > 0
    assert model["max_grad_rel"] < 1e-4, model
    model = results["model_0427"]  # RECIPE=2026-04-27, looped: sparse gate, SmearGate, two lanes
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6) and model["max_grad_rel"] < 1e-4, model
    assert min(model["grad_max"][name] for name in ("blocks.5.attn.attn_gate_w", "smear_lambda",
                                                     "parallel_post_lambdas", "parallel_resid_lambdas")) > 0
