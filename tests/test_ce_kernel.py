"""CE_KERNEL: the fused softcapped cross-entropy op of train_gpt.py (SPEC_0427 §6.5; training only). The probe and
GPT.forward's dispatch run everywhere; the kernels run under Triton's CPU interpreter in a child process, against
F.cross_entropy of the softcapped logits. Selection: test_kernel_selection.py; write sets: test_kernel_mutations.py."""
import pytest
import torch
import torch.nn.functional as F

from tgpt_util import TINY_0427_ENV, require_triton, run_under_triton_interpreter, tgpt  # noqa: F401  (fixture)

CPU = torch.device("cpu")


def softcapped(logits, softcap):
    return softcap * torch.tanh(logits.float() / softcap)


class _NoSlopeBackward(torch.autograd.Function):
    """The right per-row losses with a backward that forgets the softcap's derivative dz/dx (softmax - onehot)."""

    @staticmethod
    def forward(ctx, logits, targets, softcap):
        ctx.save_for_backward(logits, targets)
        ctx.softcap = softcap
        return F.cross_entropy(softcapped(logits, softcap), targets, reduction="none")

    @staticmethod
    def backward(ctx, grad):
        logits, targets = ctx.saved_tensors
        probs = softcapped(logits, ctx.softcap).softmax(-1) - F.one_hot(targets, logits.size(-1))
        return (grad[:, None] * probs).to(logits.dtype), None, None


def test_probe_rejects_a_kernel_that_computes_something_else(tgpt, monkeypatch):
    """The probe works at the softcap's scale, where tanh bends: cross-entropy of the uncapped logits fails in the
    loss, the right loss with a backward that skips dz/dx fails in dx; the PyTorch form itself passes."""
    uncapped = lambda logits, targets, softcap: F.cross_entropy(logits.float(), targets, reduction="none")  # noqa
    monkeypatch.setattr(tgpt, "fused_ce_op", lambda: uncapped)
    with pytest.raises(RuntimeError, match="fused CE kernel differs from the PyTorch form: loss max error"):
        tgpt._probe_ce_kernel(300, 30.0, CPU)
    monkeypatch.setattr(tgpt, "fused_ce_op", lambda: _NoSlopeBackward.apply)
    with pytest.raises(RuntimeError, match="fused CE kernel differs from the PyTorch form: dx max error"):
        tgpt._probe_ce_kernel(300, 30.0, CPU)
    plain = lambda logits, targets, softcap: F.cross_entropy(softcapped(logits, softcap), targets,  # noqa: E731
                                                             reduction="none")
    monkeypatch.setattr(tgpt, "fused_ce_op", lambda: plain)
    tgpt._probe_ce_kernel(300, 30.0, CPU)


def test_forward_uses_the_op_for_gradients_only(tgpt):
    """GPT.forward hands the op the logits before the softcap (rows, V) and the flat targets and takes the mean;
    under no_grad / inference_mode (the evals) it keeps the plain form."""
    h = tgpt.Hyperparameters.from_env(dict(TINY_0427_ENV, TRAIN_SEQ_LEN="16", EVAL_SEQ_LEN="16", EVAL_STRIDE="8",
                                            TTT_LORA_CHUNK="16"))
    model = tgpt.build_model(h, CPU)
    ids = torch.randint(0, h.vocab_size, (2, 17), generator=torch.Generator().manual_seed(0))
    plain = model(ids[:, :-1], ids[:, 1:])
    calls = []

    def op(logits, targets, softcap):
        calls.append((tuple(logits.shape), tuple(targets.shape), softcap))
        return F.cross_entropy(softcapped(logits, softcap), targets, reduction="none")
    model.ce_op = op
    fused = model(ids[:, :-1], ids[:, 1:])
    assert calls == [((32, h.vocab_size), (32,), h.logit_softcap)]
    assert torch.allclose(fused, plain, rtol=1e-6) and fused.requires_grad
    with torch.no_grad():
        model(ids[:, :-1], ids[:, 1:])
    with torch.inference_mode():
        model(ids[:, :-1], ids[:, 1:])
    assert len(calls) == 1


def test_op_traces_with_fake_tensors_as_torch_compile_does(tgpt):
    """What torch.compile sees (fake tensors, no kernel runs): the loss and dx shapes and dtypes (dx in the logits'
    dtype), and forward and backward as the two opaque ops."""
    require_triton()
    from torch.fx.experimental.proxy_tensor import make_fx
    op = tgpt.fused_ce_op()

    def step(logits, targets):
        loss = op(logits, targets, 30.0).mean()
        return loss, torch.autograd.grad(loss, logits)[0]
    logits = torch.randn(6, 1500, dtype=torch.bfloat16, requires_grad=True)
    graph = make_fx(step, tracing_mode="fake")(logits, torch.randint(1500, (6,)))
    calls = [str(node.target) for node in graph.graph.nodes if node.op == "call_function"]
    assert "pgolf.softcapped_ce.default" in calls and "pgolf.softcapped_ce_backward.default" in calls
    outputs = [node for node in graph.graph.nodes if node.op == "output"][0].args[0]
    assert [(tuple(t.meta["val"].shape), t.meta["val"].dtype) for t in outputs] == [
        ((), torch.float32), ((6, 1500), torch.bfloat16)]


def test_fused_ce_matches_the_pytorch_form_under_the_triton_interpreter():
    results = run_under_triton_interpreter("ce_kernel_interpreted.py")
    assert len(results["op"]) == 8 and results["probe"] == "passed"
    for case in results["op"]:  # fp32 math on the same inputs: losses all but equal; dx in the logits' dtype
        bf16 = case["case"][2] == "torch.bfloat16"
        assert case["dtypes"] == ["torch.float32", case["case"][2]], case
        assert max(case["loss"], case["mean"]) < 1e-6, case
        assert max(case["dx"], case["mean_dx"]) < (1e-2 if bf16 else 1e-6), case  # bf16: within its rounding
    model = results["model_0427"]  # one training step of the tiny 2026-04-27 model, looping on
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6)
    assert model["grad_names"] and model["num_grads"] >= 30 and model["grad_max"]["tok_emb.weight"] > 0
    assert model["max_grad_rel"] < 1e-4, model
