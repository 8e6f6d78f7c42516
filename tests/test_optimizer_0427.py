"""The optimizer side of SPEC_0427 §6 (and §0.10/§0.11 as we decided them): Polar-Express Newton-Schulz
(MUON_NS_COEFFICIENTS), the grouped all-reduce of the small replicated grads, the 04-27 schedule and optimizer
settings, and the warm-up restore that resets Muon's momentum (the record's does not, §0.10). The grouped all-reduce
of the small replicated grads (§6.2) on 2 gloo ranks: test_recipe_0409.py's optimizer-ranks test."""
import pytest
import torch
from torch import nn

from tgpt_util import TINY_0427_ENV, tgpt, tiny_data  # noqa: F401  (fixtures)

CPU = torch.device("cpu")
# SPEC_0427 §6.3, copied from the spec, not from train_gpt.py
POLAR_EXPRESS = [(8.156554524902461, -22.48329292557795, 15.878769915207462),
                 (4.042929935166739, -2.808917465908714, 0.5000178451051316),
                 (3.8916678022926607, -2.772484153217685, 0.5060648178503393),
                 (3.285753657755655, -2.3681294933425376, 0.46449024233003106),
                 (2.3465413258596377, -1.7097828382687081, 0.42323551169305323)]
# RECIPE=2026-04-27 with the run's GPTQ reserve (SPEC_0427 §6.4's numbers; the recipe's own is 8 s, §0.4)
ENV_0427 = dict(TINY_0427_ENV, TRAIN_SEQ_LEN="16", EVAL_SEQ_LEN="16", EVAL_STRIDE="8", GPTQ_RESERVE_SECONDS="0.5",
                MUON_NS_COEFFICIENTS="polar_express", MAX_WALLCLOCK_SECONDS="600", TTT_LORA_CHUNK="16")


def hand_polar_express(g, steps=5):
    """§6.3 for one matrix: transpose if rows > cols, X /= (|X|_F + 1e-7), per tuple A = X X^T, B = bA + cA^2,
    X = aX + BX (a sixth step starts the list again), transpose back."""
    x = g.T if g.size(0) > g.size(1) else g
    x = x / (torch.linalg.matrix_norm(x) + 1e-7)
    for step in range(steps):
        a, b, c = POLAR_EXPRESS[step % 5]
        gram = x @ x.T
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.T if g.size(0) > g.size(1) else x


def hand_quintic(g, steps=5):  # SPEC §5, in the operation order train_gpt.py had before Polar Express
    a, b, c = 3.4445, -4.7750, 2.0315
    x = g.mT if g.size(-2) > g.size(-1) else g
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    for _ in range(steps):
        gram = x @ x.mT
        x = a * x + (b * gram + c * (gram @ gram)) @ x
    return x.mT if g.size(-2) > g.size(-1) else x


def test_polar_express_matches_the_spec_and_the_quintic_is_unchanged(tgpt):
    generator = torch.Generator().manual_seed(0)
    polar = tgpt.NS_COEFFICIENTS["polar_express"]
    assert [tuple(t) for t in polar] == POLAR_EXPRESS  # exactly, all 15 numbers
    for shape in ((3, 24, 40), (2, 40, 24), (1, 32, 32)):
        batch = torch.randn(shape, generator=generator)
        for steps in (5, 7):
            got = tgpt.newton_schulz5(batch, steps, polar)
            want = torch.stack([hand_polar_express(matrix, steps) for matrix in batch])
            assert torch.allclose(got, want, atol=1e-5, rtol=1e-5), (shape, steps, (got - want).abs().max())
        singular = torch.linalg.svdvals(tgpt.newton_schulz5(batch, 5, polar))
        assert 0.8 < singular.min() and singular.max() < 1.2  # nearer 1 than the quintic's (0.68 ... 1.13)
        assert torch.equal(tgpt.newton_schulz5(batch, 5), hand_quintic(batch))  # the default: bit for bit as before
        assert (tgpt.newton_schulz5(batch, 5) - tgpt.newton_schulz5(batch, 5, polar)).abs().max() > 1e-2


def test_muon_step_with_polar_express_matches_a_hand_computation(tgpt):
    """Two ParallelMuon steps (MuonEq-R on, as 04-27) with MUON_NS_COEFFICIENTS=polar_express on a wide and a tall
    bank: B = mu B + G, N = G + mu B, rows of N to unit norm, Polar Express, p = p (1 - lr wd) - lr s U."""
    lr, mu, wd = 0.026, 0.97, 0.095
    generator = torch.Generator().manual_seed(3)
    banks = [nn.Parameter(torch.randn(3, 4, 6, generator=generator)),
             nn.Parameter(torch.randn(2, 6, 4, generator=generator))]
    expected = [bank.detach().clone() for bank in banks]
    momenta = [torch.zeros_like(bank) for bank in banks]
    h = tgpt.Hyperparameters(matrix_lr=lr, muon_momentum=mu, muon_wd=wd, muon_row_normalize=True,
                             muon_ns_coefficients="polar_express")
    muon = tgpt.ParallelMuon(banks, h, tgpt.DistInfo(0, 1, CPU))
    for _ in range(2):
        grads = [torch.randn(bank.shape, generator=generator) for bank in banks]
        for bank, grad in zip(banks, grads):
            bank.grad = grad.clone()
        muon.launch_reduce_scatter()
        muon.step()
        for index, grad in enumerate(grads):
            momenta[index] = mu * momenta[index] + grad
            for m in range(grad.size(0)):
                update = grad[m] + mu * momenta[index][m]
                update = update / update.norm(dim=1, keepdim=True).clamp_min(1e-7)
                scale = max(1.0, update.size(0) / update.size(1)) ** 0.5
                expected[index][m] = expected[index][m] * (1 - lr * wd) - lr * scale * hand_polar_express(update)
        for bank, want in zip(banks, expected):
            assert torch.allclose(bank.detach(), want, atol=2e-6), (bank - want).abs().max()


def test_schedule_and_optimizer_settings_at_the_0427_values(tgpt):
    """SPEC_0427 §6.4: cap' = 600 s - 0.5 s; multiplier 1 before frac 0.15, (1 - frac)/0.85 after, floored at 0.1
    from frac 0.915 (548.5 s); Muon momentum 0.92 -> 0.97 over 1500 steps; Adam betas (0.9, 0.99); Muon lr 0.026."""
    h = tgpt.Hyperparameters.from_env(ENV_0427)
    assert h.train_budget_ms == 599_500.0
    scale = lambda frac: tgpt.lr_scale_at(h, 0, frac * 599_500.0)  # noqa: E731
    assert [scale(f) for f in (0.0, 0.1499, 0.15, 0.5, 0.9, 0.915, 0.95, 1.0)] == pytest.approx(
        [1.0, 1.0, 1.0, 0.5 / 0.85, 0.1 / 0.85, 0.1, 0.1, 0.1])
    assert scale(0.9149) > 0.1 and 0.915 * 599.5 == pytest.approx(548.5, abs=0.1)
    assert [tgpt.muon_momentum_at(h, s) for s in (0, 750, 1500, 4000)] == pytest.approx([0.92, 0.945, 0.97, 0.97])
    optimizers = tgpt.Optimizers(h, tgpt.build_model(h, CPU), tgpt.DistInfo(0, 1, CPU))
    assert all(group["betas"] == (0.9, 0.99) for adam in optimizers.adams for group in adam.param_groups)
    optimizers.set_schedule(scale(0.5), tgpt.muon_momentum_at(h, 1500))
    muon = optimizers.muon.param_groups[0]
    assert (muon["base_lr"], muon["lr"], muon["momentum"]) == pytest.approx((0.026, 0.026 * 0.5 / 0.85, 0.97))
    assert optimizers.muon.coefficients == tgpt.NS_COEFFICIENTS["polar_express"]
    with pytest.raises(tgpt.ConfigError, match="MUON_NS_COEFFICIENTS='cubic': expected one of quintic, polar_expr"):
        tgpt.Hyperparameters.from_env({"MUON_NS_COEFFICIENTS": "cubic"})


def test_warmup_restore_resets_muon_momentum(tgpt, tiny_data):
    """SPEC_0427 §0.10, not copied: after the warm-up the first real step equals a fresh optimizer's bit for bit,
    Muon's momentum included. Control: the same warm-up steps with only the weights restored (the record's Muon, whose
    momentum sits outside state_dict) give a different first step."""
    h = tgpt.Hyperparameters.from_env(dict(tiny_data["env"], WARMUP_STEPS="1", TRAIN_BATCH_TOKENS="512",
                                           MUON_NS_COEFFICIENTS="polar_express"))
    dist_info = tgpt.DistInfo(0, 1, CPU)

    class Silent:
        def log(self, msg, console=True):
            pass

    def first_step(model, optimizers, seed=7):
        generator = torch.Generator().manual_seed(seed)
        for param in model.parameters():
            param.grad = torch.randn(param.shape, generator=generator)
        optimizers.set_schedule(1.0, tgpt.muon_momentum_at(h, 0))
        optimizers.step()
        return {k: v.clone() for k, v in model.state_dict().items()}

    fresh = tgpt.build_model(h, CPU)
    want = first_step(fresh, tgpt.Optimizers(h, fresh, dist_info))
    model = tgpt.build_model(h, CPU)
    optimizers = tgpt.Optimizers(h, model, dist_info)
    tgpt.warmup_and_rewind(h, dist_info, Silent(), model, model, optimizers,
                           lambda: tgpt.make_train_loader(h, dist_info, Silent()))
    got = first_step(model, optimizers)
    assert all(torch.equal(got[k], want[k]) for k in want)
    control = tgpt.build_model(h, CPU)
    initial = {k: v.clone() for k, v in control.state_dict().items()}
    control_optimizers = tgpt.Optimizers(h, control, dist_info)
    first_step(control, control_optimizers, seed=8)  # a warm-up step: Muon's momentum buffers fill
    control.load_state_dict(initial)
    for adam in control_optimizers.adams:  # Adam's moments cleared, Muon's kept
        adam.state.clear()
    kept = first_step(control, control_optimizers)
    assert (kept["qo_bank"] - want["qo_bank"]).abs().max() > 1e-4

