"""RECIPE=2026-04-09 (SPEC_0409): the recipe table and its overrides, the model (parameter count, layer
lists, looping, parallel residuals, skip gates, bf16 RoPE tables, same-seed init) against references written from
SPEC_0409 §4, MuonEq-R and clipping of the reduced gradients (a hand computation; 2 gloo ranks vs 1), the
wallclock-fraction warmdown with the GPTQ reserve in the real training loop, the Hessians of the GPTQ calibration,
and the kernel probes at the recipe's shapes. The whole pipeline on the CPU: tests/test_run_sh_recipes.py."""
import math
import re
import subprocess
import sys
import types

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from test_eval import ListLogger
from test_gptq import record_0409_shapes
from tgpt_util import REPO, TINY_0409_ENV, require_triton, run_env, tgpt, tiny_data  # noqa: F401 (fixtures)

CPU = torch.device("cpu")

# SPEC_0409 §1 (the record run: QK_GAIN_INIT 5.25, TTT on) and §2-§7, as env values.
SPEC_0409 = {
    "SEED": 1337, "QK_GAIN_INIT": 5.25, "TTT_ENABLED": True, "TTT_LR": 0.005, "TTT_EPOCHS": 3, "TTT_MOMENTUM": 0.9,
    "TTT_CHUNK_TOKENS": 32768, "NUM_LAYERS": 11, "MODEL_DIM": 512, "NUM_HEADS": 8, "NUM_KV_HEADS": 4,
    "MLP_MULT": 4.0, "VOCAB_SIZE": 8192, "XSA_LAST_N": 11, "ROPE_DIMS": 16, "ROPE_BASE": 10000.0, "LN_SCALE": True,
    "SKIP_GATES_ENABLED": True, "LOGIT_SOFTCAP": 30.0, "NUM_LOOPS": 2, "LOOP_START": 3, "LOOP_END": 5,
    "ENABLE_LOOPING_AT": 0.35, "PARALLEL_RESIDUAL_START": 7, "MATRIX_LR": 0.022, "SCALAR_LR": 0.02,
    "TIED_EMBED_LR": 0.03, "MUON_WD": 0.095, "ADAM_WD": 0.02, "EMBED_WD": 0.085, "MUON_MOMENTUM": 0.99,
    "MUON_MOMENTUM_WARMUP_START": 0.92, "MUON_MOMENTUM_WARMUP_STEPS": 1500, "MUON_BACKEND_STEPS": 5,
    "MUON_ROW_NORMALIZE": True, "WARMDOWN_FRAC": 0.72, "WARMDOWN_ITERS": 0, "MIN_LR": 0.0, "EMA_DECAY": 0.9965,
    "EMA_ENABLED": True, "SWA_ENABLED": False, "GRAD_CLIP_NORM": 0.3, "GRAD_CLIP_SCOPE": "reduced",
    "ITERATIONS": 20000, "WARMUP_STEPS": 20, "MAX_WALLCLOCK_SECONDS": 600.0, "GPTQ_RESERVE_SECONDS": 12.0,
    "TRAIN_BATCH_TOKENS": 786432, "TRAIN_SEQ_LEN": 2048, "EVAL_SEQ_LEN": 2048, "EVAL_STRIDE": 64,
    "GPTQ_CALIBRATION_BATCHES": 64, "MATRIX_BITS": 6, "EMBED_BITS": 8, "MATRIX_CLIP_SIGMAS": 12.85,
    "EMBED_CLIP_SIGMAS": 20.0, "QUANTIZER": "gptq", "TRAIN_LOADER": "shuffled", "TRAIN_SHUFFLE_SEED": "rank",
    "TIE_EMBEDDINGS": True, "TIED_EMBED_INIT_STD": 0.005, "BETA1": 0.9, "BETA2": 0.95, "ADAM_EPS": 1e-8,
    "VAL_BATCH_SIZE": 524288, "VAL_LOSS_EVERY": 4000, "TRAIN_LOG_EVERY": 500, "BIGRAM_ENABLED": False,
    "SMEAR_ENABLED": False, "VE_ENABLED": False, "LATE_QAT_THRESHOLD": 0.0, "QAT_ENABLED": False,
    "ROPE_BF16": True, "DATA_PATH": "./data/datasets/fineweb10B_sp8192",
    "TOKENIZER_PATH": "./data/tokenizers/fineweb_8192_bpe.model",
    "CONTROL_TENSOR_NAME_PATTERNS": "attn_scale,attn_scales,mlp_scale,mlp_scales,resid_mix,resid_mixes,q_gain,"
                                    "skip_weight,skip_weights,skip_gates"}
LOOPED = ([0, 1, 2, 3, 4, 5, 3, 4], [5, 3, 4, 5, 6, 7, 8, 9, 10])  # SPEC_0409 §4
PLAIN = ([0, 1, 2, 3, 4], [5, 6, 7, 8, 9, 10])


def tiny(tg, **env):
    return tg.Hyperparameters.from_env(dict(TINY_0409_ENV, **{k: str(v) for k, v in env.items()}))


# ---- the recipe table ----

def test_recipe_gives_spec_0409_values_env_overrides_and_unknown_recipes_are_errors(tgpt):
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"})
    assert {name: getattr(h, name.lower()) for name in SPEC_0409} == SPEC_0409
    assert (h.recipe, h.effective_rope_train_seq_len, h.train_budget_ms) == ("2026-04-09", 2048, 588_000.0)
    assert set(tgpt.RECIPES["2026-04-09"]) <= {f.name for f in tgpt.fields(tgpt.Hyperparameters)}
    # every table entry is an ordinary setting: the environment wins over the recipe, the rest stays the recipe's
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "QK_GAIN_INIT": "5.0", "NUM_LOOPS": "0",
                                       "MUON_DTYPE": "bf16", "QUANTIZER": "rowclip", "DATA_PATH": "/d"})
    assert (h.qk_gain_init, h.num_loops, h.muon_dtype, h.quantizer, h.data_path) == (5.0, 0, "bf16", "rowclip", "/d")
    assert (h.mlp_mult, h.vocab_size, h.parallel_residual_start) == (4.0, 8192, 7)
    # the default recipe is the dataclass's defaults, the 2026-03-23 record
    default = tgpt.Hyperparameters.from_env({"RUN_ID": "x"})
    assert default == tgpt.Hyperparameters.from_env({"RUN_ID": "x", "RECIPE": "2026-03-23"})
    assert default == tgpt.Hyperparameters(run_id="x")
    assert (default.num_loops, default.warmdown_frac, default.grad_clip_scope, default.rope_bf16) == (
        0, 0.0, "local", False)
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-10", "NUM_LAYERS": "x"})
    assert info.value.errors == ["RECIPE='2026-04-10': expected one of 2026-03-23, 2026-04-09, 2026-04-27"]


def test_config_lines_show_the_recipe_and_its_resolved_values(tgpt):
    logger = ListLogger()
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "TTT_LR": "0.01"})
    tgpt.log_run_header(logger, h, "# code", 6, {}, 6)
    config = [line for line in logger.lines if line.startswith("config:")]
    for line in ("config:recipe=2026-04-09", "config:ttt_lr=0.01", "config:qk_gain_init=5.25", "config:num_loops=2",
                 "config:warmdown_frac=0.72", "config:quantizer=gptq", "config:vocab_size=8192"):
        assert line in config, line
    assert len(config) == len(tgpt.fields(tgpt.Hyperparameters))


@pytest.mark.parametrize("recipe,column", [("2026-04-09", -3), ("2026-04-27", -2)])
def test_readme_recipe_table_names_every_setting_the_recipe_changes(tgpt, recipe, column):
    """README's recipe table lists each setting whose recipe value differs from the default, with it."""
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("| setting | 2026-03-23 | 2026-04-09 | 2026-04-27 |"):]
    table = table[:table.index("\n\n")]
    for name, value in tgpt.RECIPES[recipe].items():
        default = getattr(tgpt.Hyperparameters, name)
        if value != default:
            row = next((line for line in table.splitlines() if "`%s`" % name.upper() in line), None)
            assert row is not None, name.upper()
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                assert "%g" % value in row.split("|")[column], (name, row)


def test_recipe_settings_are_checked_at_start_up(tgpt):
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({
            "RECIPE": "2026-04-09", "WARMDOWN_ITERS": "100", "MIN_LR": "-0.1", "GPTQ_RESERVE_SECONDS": "600",
            "LOOP_END": "11", "ENABLE_LOOPING_AT": "2", "GRAD_CLIP_SCOPE": "global", "MUON_DTYPE": "fp16",
            "GPTQ_CALIBRATION_BATCHES": "0"})
    assert sorted(info.value.errors) == sorted([
        "WARMDOWN_ITERS=100 and WARMDOWN_FRAC=0.72: set one of them (the other to 0)",
        "MIN_LR=-0.1 must be in [0, 1] (a floor of the LR multiplier)",
        "GPTQ_RESERVE_SECONDS=600.0 must be >= 0 and below MAX_WALLCLOCK_SECONDS=600.0",
        "LOOP_START=3 and LOOP_END=11 must satisfy 0 <= LOOP_START <= LOOP_END < NUM_LAYERS=11",
        "ENABLE_LOOPING_AT=2.0 must be in [0, 1]",
        "GRAD_CLIP_SCOPE='global': expected one of local, reduced", "MUON_DTYPE='fp16': expected one of bf16, fp32",
        "GPTQ_CALIBRATION_BATCHES=0 must be >= 1"])
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"NUM_LOOPS": "-1", "WARMDOWN_FRAC": "1.5", "WARMDOWN_ITERS": "0"})
    assert sorted(info.value.errors) == ["NUM_LOOPS=-1 must be >= 0", "WARMDOWN_FRAC=1.5 must be in [0, 1]"]
    # the recipe's own values count as its defaults: GPTQ settings under 2026-04-09 are no error
    tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "GPTQ_CALIBRATION_BATCHES": "8"})
    with pytest.raises(tgpt.ConfigError, match="GPTQ_CALIBRATION_BATCHES apply to QUANTIZER=gptq only"):
        tgpt.Hyperparameters.from_env({"GPTQ_CALIBRATION_BATCHES": "8"})


# ---- the model at full size (SPEC_0409 §4) ----

def test_full_size_model_parameters_layer_lists_and_dtypes(tgpt):
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"})
    with torch.device("meta"):
        model = tgpt.GPT(h)
    assert sum(p.numel() for p in model.parameters()) == 35_944_536
    flat = tgpt.unbank_state_dict(model.state_dict())
    assert {name: tuple(t.shape) for name, t in flat.items()} == record_0409_shapes()
    assert model.layer_orders == {True: LOOPED, False: PLAIN} and model.looping is False
    assert [block.parallel for block in model.blocks] == [False] * 7 + [True] * 4
    assert all(block.attn.use_xsa for block in model.blocks)
    assert model.bigram is None and model.smear is None and model.ve_shared is None and model.lm_head is None
    assert model.rope_args == (2048, True)
    tgpt.apply_dtype_recipe(model, h)
    assert {name for name, p in model.named_parameters() if p.dtype == torch.bfloat16} == {"tok_emb.weight"}
    assert model.skip_gates.dtype == model.skip_weights.dtype == torch.float32  # 2-D, fp32 by their pattern
    plain = tgpt.layer_orders(tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "NUM_LOOPS": "0"}))
    assert plain == {True: PLAIN, False: PLAIN}
    with torch.device("meta"):
        record = tgpt.GPT(tgpt.Hyperparameters())
    assert record.layer_orders[True] == PLAIN and tuple(record.skip_weights.shape) == (5, 512)
    assert record.skip_gates is None and record.rope_args == (1024, False)


def spec_0409_initial_state(h) -> tuple:
    """SPEC_0409 §4's draw order written from the spec: after seeding, the Embedding's default N(0, 1), each block's
    six nn.Linear default inits (kaiming-uniform) in module order, then tok_emb ~ N(0, std^2) and orthogonal c_q,
    c_k, c_v, fc per block (attn.proj and mlp.proj zero). -> (the weights by name, generator state after)."""
    n, d = h.num_layers, h.model_dim
    kv, hidden = h.num_kv_heads * d // h.num_heads, int(h.mlp_mult * d)
    parts = (("attn.c_q", (d, d)), ("attn.c_k", (kv, d)), ("attn.c_v", (kv, d)), ("attn.proj", (d, d)),
             ("mlp.fc", (hidden, d)), ("mlp.proj", (d, hidden)))
    torch.manual_seed(h.seed)
    state = {"tok_emb.weight": torch.empty(h.vocab_size, d).normal_()}
    for i in range(n):
        for part, shape in parts:
            state[f"blocks.{i}.{part}.weight"] = nn.init.kaiming_uniform_(torch.empty(shape), a=math.sqrt(5))
    state["tok_emb.weight"].normal_(0.0, h.tied_embed_init_std)
    for i in range(n):
        for part, _ in parts:
            weight = state[f"blocks.{i}.{part}.weight"]
            if part.endswith(".proj"):
                weight.zero_()
            elif min(weight.shape) >= 64:
                nn.init.orthogonal_(weight)
    return state, torch.get_rng_state()


def test_same_seed_gives_spec_0409_initial_weights(tgpt):
    h = tiny(tgpt, MODEL_DIM=128, SEED=42)  # every matrix >= 64 wide, so the record's orthogonal rule applies
    model = tgpt.build_model(h, CPU)
    after_build = torch.get_rng_state()
    expected, after_spec = spec_0409_initial_state(h)
    flat = tgpt.unbank_state_dict(model.state_dict())
    assert [name for name in expected if not torch.equal(flat[name], expected[name])] == []
    assert torch.equal(after_build, after_spec)  # not one draw more or less than the record's
    assert torch.equal(model.skip_weights, torch.ones(5, 128)) and torch.count_nonzero(model.skip_gates) == 0
    without = tgpt.build_model(tiny(tgpt, MODEL_DIM=128, SEED=42, INIT_LINEAR_DRAWS=0), CPU)
    assert not torch.equal(without.qo_bank, model.qo_bank)  # the construction draws move every later one


# ---- the forward (SPEC_0409 §4) ----

def randomized(tg, h, seed=0):
    """A tiny 04-09 model with every parameter random, so every path carries signal (init zeroes W_o, W_down)."""
    model = tg.build_model(h, CPU)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            scale = 0.5 if name.startswith(("skip_gates", "blocks")) and param.ndim <= 2 else 0.05
            param.add_(torch.randn(param.shape, generator=generator) * scale)
    return model


def spec_0409_forward(tg, h, model, ids, looping, parallel=True, inputs=None):
    """SPEC_0409 §4's forward written out, reading the weights from `model`: layer lists from LOOP_START, LOOP_END,
    NUM_LOOPS; skip x = g x + (1 - g)(w_j s); sequential or (from PARALLEL_RESIDUAL_START) parallel blocks;
    f_i = 1/sqrt(i+1) by physical index; GQA attention with q/k RMS norm, partial RoPE (bf16 tables), q gain and XSA;
    leaky(0.5)^2 MLP; soft-capped tied logits. `inputs` (a dict) collects each matrix's input by weight name."""
    n, d = h.num_layers, h.model_dim
    heads, kv_heads, head_dim = h.num_heads, h.num_kv_heads, d // h.num_heads
    order = list(range(n))
    if looping:
        segment = list(range(h.loop_start, h.loop_end + 1))
        order = order[:h.loop_start] + segment * (h.num_loops + 1) + order[h.loop_end + 1:]
    encoder, decoder = order[:len(order) // 2], order[len(order) // 2:]
    rope = tg.rotary_tables(ids.size(1), head_dim, h.rope_dims, h.rope_base, CPU, torch.float32, h.train_seq_len,
                            True)
    rms = lambda x: F.rms_norm(x, (x.size(-1),))  # noqa: E731
    record = (lambda name, x: inputs.setdefault(name, []).append(x)) if inputs is not None else (lambda *a: None)
    batch, seq_len = ids.shape

    def attention(i, x):
        record(f"blocks.{i}.attn.c_q.weight", x)
        q = F.linear(x, model.qo_bank[i]).view(batch, seq_len, heads, head_dim)
        k = F.linear(x, model.kv_bank[i]).view(batch, seq_len, kv_heads, head_dim)
        v = F.linear(x, model.kv_bank[n + i]).view(batch, seq_len, kv_heads, head_dim)
        q = tg.apply_partial_rotary(rms(q), *rope) * model.blocks[i].attn.q_gain[None, None, :, None]
        k = tg.apply_partial_rotary(rms(k), *rope)
        group = heads // kv_heads
        y = F.scaled_dot_product_attention(q.transpose(1, 2), k.repeat_interleave(group, 2).transpose(1, 2),
                                           v.repeat_interleave(group, 2).transpose(1, 2), is_causal=True)
        y = y.transpose(1, 2).reshape(batch, seq_len, kv_heads, group, head_dim)
        unit = (v / v.norm(dim=-1, keepdim=True)).unsqueeze(3)
        y = (y - (y * unit).sum(-1, keepdim=True) * unit).reshape(batch, seq_len, d)
        record(f"blocks.{i}.attn.proj.weight", y)
        return F.linear(y, model.qo_bank[n + i])

    def mlp(i, x):
        record(f"blocks.{i}.mlp.fc.weight", x)
        act = F.leaky_relu(F.linear(x, model.mlp_up_bank[i]), 0.5).square()
        record(f"blocks.{i}.mlp.proj.weight", act)
        return F.linear(act, model.mlp_down_bank[i])

    def block(i, x):
        b, f = model.blocks[i], 1.0 / math.sqrt(i + 1)
        x_in = b.resid_mix[0] * x + b.resid_mix[1] * x0
        if parallel and i >= h.parallel_residual_start:
            normed = rms(x_in) * f
            return x_in + b.attn_scale * attention(i, normed) + b.mlp_scale * mlp(i, normed)
        x_mid = x_in + b.attn_scale * attention(i, rms(x_in) * f)
        return x_mid + b.mlp_scale * mlp(i, rms(x_mid) * f)

    x = x0 = rms(model.tok_emb.weight[ids])
    stack = []
    for i in encoder:
        x = block(i, x)
        stack.append(x)
    for j, i in enumerate(decoder):
        if j < model.skip_weights.size(0) and stack:
            gate = torch.sigmoid(model.skip_gates[j])
            x = gate * x + (1 - gate) * (model.skip_weights[j] * stack.pop())
        x = block(i, x)
    record("tok_emb.weight", rms(x))
    return h.logit_softcap * torch.tanh(rms(x) @ model.tok_emb.weight.T / h.logit_softcap)


@pytest.mark.parametrize("looping", [False, True])
def test_forward_is_spec_0409_forward(tgpt, looping):
    h = tiny(tgpt)
    model = randomized(tgpt, h)
    model.looping = looping
    ids = torch.randint(0, h.vocab_size, (2, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        got = model.logits_from_hidden(model.forward_hidden(ids))
        want = spec_0409_forward(tgpt, h, model, ids, looping)
        assert (got - want).abs().max() < 2e-5
        # the reference tells the variants apart, so the agreement above means something
        assert (spec_0409_forward(tgpt, h, model, ids, looping, parallel=False) - want).abs().max() > 1e-2
        assert (spec_0409_forward(tgpt, h, model, ids, not looping) - want).abs().max() > 1e-2


def test_skip_gate_chooses_between_the_stream_and_the_skip(tgpt):
    """g = sigmoid(gate): a gate far above 0 keeps the stream x (as if the skip weight were 0), far below replaces
    x by w_j * s; at init (gate 0) the two are averaged."""
    h = tiny(tgpt)
    ids = torch.randint(0, h.vocab_size, (2, 16), generator=torch.Generator().manual_seed(2))
    model = randomized(tgpt, h)
    logits = lambda: model.logits_from_hidden(model.forward_hidden(ids))  # noqa: E731
    with torch.no_grad():
        model.skip_gates.fill_(30.0)
        kept = logits()
        weights = model.skip_weights.clone()
        model.skip_weights.zero_()
        assert torch.allclose(kept, logits(), atol=1e-5)
        model.skip_weights.copy_(weights)
        model.skip_gates.fill_(-30.0)
        replaced = logits()
        assert (replaced - kept).abs().max() > 1e-2
        model.skip_gates.zero_()
        half = logits()
        assert (half - kept).abs().max() > 1e-3 and (half - replaced).abs().max() > 1e-3


def test_parallel_block_adds_both_branches_of_one_input(tgpt):
    """Block i >= PARALLEL_RESIDUAL_START: out = x_in + alpha Attn(h) + beta MLP(h), h = rms(x_in) f_i; a block before
    it feeds the MLP from x_in + alpha Attn(.)."""
    h = tiny(tgpt)
    model = randomized(tgpt, h)
    x, x0 = torch.randn(2, 16, 64), torch.randn(2, 16, 64)
    rope = tgpt.rotary_tables(16, 16, 8, 10000.0, CPU, torch.float32) + (None,)  # dense rows
    for i, parallel in ((4, True), (5, True), (1, False)):
        block, weights = model.blocks[i], model.layer_weights(i)
        assert block.parallel is parallel
        with torch.no_grad():
            x_in = block.resid_mix[0] * x + block.resid_mix[1] * x0
            normed = tgpt.rms_norm(x_in) / math.sqrt(i + 1)
            attn = block.attn(normed, *weights[:4], rope, None)
            mlp_in = normed if parallel else tgpt.rms_norm(x_in + block.attn_scale * attn) / math.sqrt(i + 1)
            want = x_in + block.attn_scale * attn + block.mlp_scale * tgpt.leaky_relu_sq_mlp(mlp_in, *weights[4:])
            assert (block(x, x0, weights, rope, None) - want).abs().max() < 1e-5


def test_rope_tables_of_the_04_09_record(tgpt):
    """SPEC_0409 §0.7 as measured on CUDA (bench/NOTES.md "RoPE tables"): the record's
    first compiled forward builds its table from fp32 positions times its bf16-rounded theta buffer, angles in
    fp32; past the RoPE train length, NTK-rescaled fp32 as without the toggle."""
    cos, sin, _ = tgpt.rotary_tables(2048, 64, 16, 10000.0, CPU, torch.float32, 2048, True)
    positions = torch.arange(2048, dtype=torch.float32)
    theta = torch.tensor([10000.0 ** (-2 * j / 16) for j in range(8)]).bfloat16().float()
    angles = torch.outer(positions, theta)
    assert torch.equal(cos[:, :8], angles.cos()) and torch.equal(sin[:, :8], angles.sin())
    assert torch.all(cos[:, 16:] == 1) and torch.all(sin[:, 16:] == 0)
    fp32 = tgpt.rotary_tables(2048, 64, 16, 10000.0, CPU, torch.float32, 2048, False)[0]
    assert torch.equal(fp32[0], cos[0]) and (fp32 - cos).abs().max() > 1e-2  # theta's rounding moves late positions
    longer = [tgpt.rotary_tables(4096, 64, 16, 10000.0, CPU, torch.float32, 2048, bf16)[:2] for bf16 in (True, False)]
    assert all(torch.equal(a, b) for a, b in zip(*longer))


# ---- optimizers (SPEC_0409 §5) ----

def hand_newton_schulz(x, steps=5):
    a, b, c = 3.4445, -4.7750, 2.0315
    transposed = x.size(0) > x.size(1)
    x = x.T if transposed else x
    x = x / (x.norm() + 1e-7)
    for _ in range(steps):
        gram = x @ x.T
        x = a * x + (b * gram + c * gram @ gram) @ x
    return x.T if transposed else x


def test_muon_step_with_muoneq_r_matches_a_hand_computation(tgpt):
    """Two steps on a wide and a tall bank (one row's gradient all zero), with and without MuonEq-R: B = mu B + G,
    N = G + mu B, each row of N divided by max(|row|, 1e-7) (MuonEq-R), NS5 per matrix, then p = p (1 - lr wd) -
    lr sqrt(max(1, rows/cols)) U. The two settings give different weights."""
    lr, mu, wd = 0.1, 0.9, 0.5
    finals = []
    for row_normalize in (True, False):
        generator = torch.Generator().manual_seed(3)
        banks = [nn.Parameter(torch.randn(3, 4, 6, generator=generator)),
                 nn.Parameter(torch.randn(2, 6, 4, generator=generator))]
        expected = [bank.detach().clone() for bank in banks]
        momenta = [torch.zeros_like(bank) for bank in banks]
        h = tgpt.Hyperparameters(matrix_lr=lr, muon_momentum=mu, muon_wd=wd, muon_row_normalize=row_normalize)
        muon = tgpt.ParallelMuon(banks, h, tgpt.DistInfo(0, 1, CPU))
        for step in range(2):
            grads = [torch.randn(bank.shape, generator=generator) for bank in banks]
            grads[0][1, 2] = 0.0
            for bank, grad in zip(banks, grads):
                bank.grad = grad.clone()
            muon.launch_reduce_scatter()
            muon.step()
            for index, grad in enumerate(grads):
                momenta[index] = mu * momenta[index] + grad
                for m in range(grad.size(0)):
                    update = grad[m] + mu * momenta[index][m]
                    if row_normalize:
                        update = update / update.norm(dim=1, keepdim=True).clamp_min(1e-7)
                    scale = max(1.0, update.size(0) / update.size(1)) ** 0.5
                    expected[index][m] = expected[index][m] * (1 - lr * wd) - lr * scale * hand_newton_schulz(update)
            for bank, want in zip(banks, expected):
                assert torch.allclose(bank.detach(), want, atol=2e-6), (row_normalize, step, (bank - want).abs().max())
        assert all(torch.isfinite(bank).all() for bank in banks)
        finals.append([bank.detach().clone() for bank in banks])
    assert all((a - b).abs().max() > 1e-3 for a, b in zip(*finals))


def test_optimizer_groups_and_weight_decays_follow_the_recipe(tgpt):
    for env, groups in (({"RECIPE": "2026-04-09"}, (0.085, 0.02, 0.095)), ({}, (0.04, 0.04, 0.04))):
        h = tgpt.Hyperparameters.from_env(dict(env, NUM_LAYERS="2", MODEL_DIM="64", NUM_HEADS="4",
                                               NUM_KV_HEADS="2", XSA_LAST_N="2", VE_LAYERS="1", LOOP_START="0",
                                               LOOP_END="1", PARALLEL_RESIDUAL_START="1"))
        model = tgpt.build_model(h, CPU)
        optimizers = tgpt.Optimizers(h, model, tgpt.DistInfo(0, 1, CPU))
        token, scalar = optimizers.adams[0].param_groups, optimizers.adams[1].param_groups
        assert (token[0]["weight_decay"], scalar[0]["weight_decay"],
                optimizers.muon.param_groups[0]["weight_decay"]) == groups
        names = {id(p): n for n, p in model.named_parameters()}
        token_names = [names[id(group["params"][0])] for group in token]
        if env:  # 2026-04-09: the tied embedding alone; skip_gates among the scalars
            assert token_names == ["tok_emb.weight"] and optimizers.muon.row_normalize
            assert "skip_gates" in {names[id(p)] for p in scalar[0]["params"]}
        else:
            assert token_names == ["tok_emb.weight", "bigram.embed.weight", "ve_shared.embed.weight"]
            assert not optimizers.muon.row_normalize


def test_reduced_clipping_on_one_rank_is_clip_grad_norm(tgpt):
    """With one rank the reduced gradients are the local ones: the clip inside the optimizer step (the banks'
    reduce-scatter shards + the replicated grads) leaves what torch's clip_grad_norm_ over all parameters leaves."""
    h = tiny(tgpt, GRAD_CLIP_SCOPE="reduced")
    model = tgpt.build_model(h, CPU)
    optimizers = tgpt.Optimizers(h, model, tgpt.DistInfo(0, 1, CPU))
    generator = torch.Generator().manual_seed(6)
    for param in model.parameters():
        param.grad = torch.randn(param.shape, generator=generator)
    expected = {name: param.grad.clone() for name, param in model.named_parameters()}
    reference = [nn.Parameter(torch.empty_like(grad)) for grad in expected.values()]
    for param, grad in zip(reference, expected.values()):
        param.grad = grad
    assert torch.nn.utils.clip_grad_norm_(reference, h.grad_clip_norm) > 10 * h.grad_clip_norm
    optimizers.muon.launch_reduce_scatter()
    optimizers.clip_reduced_grads()
    shards = {id(bank): shard for bank, shard in zip(optimizers.muon.banks, optimizers.muon.shards)}
    for name, param in model.named_parameters():
        got = shards[id(param)][:param.size(0)] if name in tgpt.BANK_LAYOUT else param.grad
        assert torch.allclose(got, expected[name], rtol=1e-5, atol=1e-9), name


def test_two_ranks_match_one_rank_when_clipping_the_reduced_gradients(tmp_path):
    """tests/scripts/optimizer_ranks.py: 3 optimizer steps of the tiny 04-09 model on gradients that differ per rank,
    2 gloo ranks (reduce-scatter and all-gather of the banks, the clip norm summed over bank shards + replicated
    grads) vs 1 rank given their mean. GRAD_CLIP_SCOPE=reduced gives the same weights; local (the 03-23 record's
    clipping of each rank's own gradients) does not, so the comparison can see the difference. Last, the grouped
    all-reduce of the small replicated grads (SPEC_0427 §6.2) against one all-reduce per tensor."""
    script = REPO / "tests" / "scripts" / "optimizer_ranks.py"
    one, two = tmp_path / "one.pt", tmp_path / "two.pt"
    for command, out in (([sys.executable, str(script)], one),
                         ([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                           str(script)], two)):
        proc = subprocess.run(command + [str(out)], env=run_env({}), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    one, two = torch.load(one), torch.load(two)
    assert one["norms"][0] < 0.3 < 10 * 0.3 < min(one["norms"][1:])  # step 0 unclipped, steps 1-2 clipped
    reduced = max((one["reduced"][k] - two["reduced"][k]).abs().max().item() for k in one["reduced"])
    local = max((one["local"][k] - two["local"][k]).abs().max().item() for k in one["local"])
    moved = max((one["reduced"][k] - one["initial"][k]).abs().max().item() for k in one["initial"])
    assert reduced < 1e-6 and local > 1e-4 and moved > 1e-3, (reduced, local, moved)
    grouped = two["grouped"]  # SPEC_0427 §6.2: one collective per dtype for the small grads, one per large tensor
    assert all(torch.equal(a, b) for a, b in zip(grouped["grouped"], grouped["per_tensor"]))  # bit for bit
    assert all(torch.allclose(a.float(), mean, rtol=1e-2) for a, mean in zip(grouped["grouped"], grouped["mean"]))
    large = [g.numel() for g in grouped["grouped"] if g.numel() > 32768]
    assert len(large) == 3 and sorted(grouped["collectives"]) == sorted(large + grouped["small"])


# ---- schedule (SPEC_0409 §5) ----

def test_warmdown_fraction_min_lr_and_the_gptq_reserve(tgpt):
    capped = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"})
    assert capped.train_budget_ms == 588_000.0  # 600 s - GPTQ_RESERVE_SECONDS 12
    fraction = lambda ms: tgpt.training_fraction(capped, 0, ms)  # noqa: E731
    assert fraction(294_000.0) == 0.5 and tgpt.training_fraction(capped, 10**6, 0.0) == 0.0  # time, not steps
    assert [tgpt.lr_scale_at(capped, 0, 588_000.0 * f) for f in (0.0, 0.27, 0.28, 0.64, 1.0, 1.2)] == pytest.approx(
        [1.0, 1.0, 1.0, 0.5, 0.0, 0.0])
    floored = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "MIN_LR": "0.1"})
    assert [tgpt.lr_scale_at(floored, 0, 588_000.0 * f) for f in (0.0, 0.64, 0.95)] == pytest.approx([1.0, 0.5, 0.1])
    uncapped = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "MAX_WALLCLOCK_SECONDS": "0",
                                              "ITERATIONS": "200", "WARMDOWN_FRAC": "0.5"})
    assert uncapped.train_budget_ms is None and tgpt.training_fraction(uncapped, 70, 10**9) == 0.35
    assert [tgpt.lr_scale_at(uncapped, s, 0.0) for s in (0, 99, 100, 150, 200)] == pytest.approx(
        [1.0, 1.0, 1.0, 0.5, 0.0])
    iters = tgpt.Hyperparameters.from_env({"MAX_WALLCLOCK_SECONDS": "0", "ITERATIONS": "100", "WARMDOWN_ITERS": "40",
                                           "MIN_LR": "0.25"})
    assert [tgpt.lr_scale_at(iters, s, 0.0) for s in (0, 60, 80, 100)] == [1.0, 1.0, 0.5, 0.25]


def test_train_loop_switches_looping_by_fraction_and_stops_at_the_reserve(tgpt, tiny_data, monkeypatch):
    """The real train(): a clock that advances 1 s per step, a 10 s cap less a 4 s GPTQ reserve. The fraction at the
    top of step k is k/6, so looping (ENABLE_LOOPING_AT 0.35) is on from step 3 and stays on, the LR multiplier is
    1 until frac 0.5, then (1 - frac)/0.5 floored at MIN_LR 0.4, and training stops after step 6 (6000 ms)."""
    h = tiny(tgpt, DATA_PATH=tiny_data["env"]["DATA_PATH"], TOKENIZER_PATH=tiny_data["env"]["TOKENIZER_PATH"],
             MAX_WALLCLOCK_SECONDS=10, GPTQ_RESERVE_SECONDS=4, ITERATIONS=100, WARMDOWN_FRAC=0.5, MIN_LR=0.4,
             VAL_LOSS_EVERY=0, TRAIN_LOG_EVERY=0)
    dist_info, logger = tgpt.DistInfo(0, 1, CPU), ListLogger()
    model = tgpt.build_model(h, CPU)
    optimizers = tgpt.Optimizers(h, model, dist_info)
    val = tgpt.load_validation_data(h, tgpt.load_tokenizer(h, ListLogger()), CPU)
    clock, looping, scales = [0.0], [], []
    run_micro_steps, set_schedule = tgpt.run_micro_steps, tgpt.Optimizers.set_schedule

    def stepping(dist_info, model_, loader):
        clock[0] += 1.0
        looping.append(model.looping)
        return run_micro_steps(dist_info, model_, loader)

    def observed_set_schedule(self, lr_scale, momentum):
        scales.append(lr_scale)
        return set_schedule(self, lr_scale, momentum)

    monkeypatch.setattr(tgpt, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(tgpt, "run_micro_steps", stepping)
    monkeypatch.setattr(tgpt.Optimizers, "set_schedule", observed_set_schedule)
    tgpt.train(h, dist_info, logger, model, model, optimizers, val,
               lambda state=None: tgpt.make_train_loader(h, dist_info, logger, state), tgpt.StopSignal(), None)
    assert looping == [False, False, False, True, True, True] and model.looping
    assert scales == pytest.approx([1.0, 1.0, 1.0, 1.0, 2 / 3, 0.4])
    assert "layer_loop:enabled step:3 frac:0.500 encoder:[0, 1, 2, 3, 2] decoder:[3, 2, 3, 4, 5]" in logger.lines
    assert "stopping_early: wallclock_cap train_time:6000ms step:6/100" in logger.lines


# ---- GPTQ calibration (SPEC_0409 §7.2) ----

def test_hessians_are_the_spec_inputs_x_transpose_x_summed_over_the_loops(tgpt):
    """The collector's sums through the model's forward (banks, folded scales, looping) == X^T X of the inputs that
    the spec forward above hands each matrix: c_q/c_k/c_v the normed block input, attn.proj the XSA'd attention
    output, fc the MLP input (a parallel block's: the attention's input), mlp.proj leaky(h)^2, tok_emb the final norm;
    blocks 2 and 3 run three times looped and their sums hold all three passes."""
    h = tiny(tgpt)
    model = randomized(tgpt, h)
    model.looping = True
    ids = torch.randint(0, h.vocab_size, (2, 32), generator=torch.Generator().manual_seed(4))
    collector, inputs = tgpt.HessianCollector(), {}
    with torch.no_grad():
        collector.add(tgpt.rms_norm(model.forward_hidden(ids, collector)), "tok_emb.weight")
        spec_0409_forward(tgpt, h, model, ids, True, inputs=inputs)
    names = {f"blocks.{i}.{part}" for i in range(6) for part in tgpt.BANK_LAYOUT["qo_bank"]
             + tgpt.BANK_LAYOUT["kv_bank"] + ("mlp.fc.weight", "mlp.proj.weight")} | {"tok_emb.weight"}
    assert set(collector) == names and len(names) == 37
    assert len(inputs["blocks.2.mlp.fc.weight"]) == 3 and len(inputs["blocks.5.mlp.fc.weight"]) == 1
    for name, sums in collector.items():
        spec_name = re.sub(r"attn\.c_[kv]", "attn.c_q", name)
        want = sum(x.reshape(-1, x.size(-1)).double().T @ x.reshape(-1, x.size(-1)).double()
                   for x in inputs[spec_name])
        assert torch.allclose(sums.double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item()), name
    # the same tensor is no alias: c_q, c_k and c_v keep separate sums
    assert collector["blocks.0.attn.c_q.weight"] is not collector["blocks.0.attn.c_k.weight"]


class FixedBatches:
    def __init__(self, batches, clock):
        self.batches, self.clock = list(batches), clock  # the training clock its reads run on (SPEC_0427 §0.4)

    def next_batch(self):
        return self.batches.pop(0)

    def close(self):
        self.closed = True


def test_collect_hessians_averages_fresh_loader_batches_in_eval_mode(tgpt):
    """GPTQ_CALIBRATION_BATCHES micro-batches of ONE fresh loader (closed after), in eval mode with looping as set,
    H = sum / batches; the model's mode is restored; lookups (bigram, value embeddings of the 03-23 model) get
    the identity, so QUANTIZER=gptq quantizes that model too."""
    h = tiny(tgpt, GPTQ_CALIBRATION_BATCHES=3)
    model = randomized(tgpt, h)
    model.looping = True
    generator = torch.Generator().manual_seed(5)
    batches = [(torch.randint(0, h.vocab_size, (2, 32), generator=generator), None) for _ in range(4)]
    loaders, modes = [], []
    model.blocks[3].register_forward_pre_hook(lambda module, args: modes.append(module.training))

    def make_loader():
        loaders.append(FixedBatches(batches, tgpt.TrainingClock()))
        return loaders[-1]

    logger = ListLogger()
    hessians = tgpt.collect_hessians(h, logger, model, make_loader)
    assert len(loaders) == 1 and loaders[0].closed and len(loaders[0].batches) == 1
    assert set(modes) == {False} and len(modes) == 9 and model.training and model.looping
    reference = tgpt.HessianCollector()
    with torch.no_grad():
        for ids, _ in batches[:3]:
            reference.add(tgpt.rms_norm(model.forward_hidden(ids, reference)), "tok_emb.weight")
    assert set(hessians) == set(reference)
    assert all(torch.allclose(hessians[k], reference[k] / 3) for k in hessians)
    assert logger.lines[0] == "GPTQ:collecting Hessians from calibration data..."
    assert re.fullmatch(r"GPTQ:collected 37 Hessians in \d+\.\ds", logger.lines[1])
    # 2026-03-23's model: bigram.embed and ve_shared.embed are lookups; the whole state quantizes with GPTQ
    h23 = tgpt.Hyperparameters.from_env({"NUM_LAYERS": "2", "MODEL_DIM": "64", "NUM_HEADS": "4",
                                         "NUM_KV_HEADS": "2", "XSA_LAST_N": "1", "VE_LAYERS": "1",
                                         "BIGRAM_VOCAB_SIZE": "1100", "BIGRAM_DIM": "64", "VOCAB_SIZE": "1100",
                                         "VE_DIM": "64", "QUANTIZER": "gptq", "GPTQ_CALIBRATION_BATCHES": "1"})
    model23 = tgpt.build_model(h23, CPU)
    hessians = tgpt.collect_hessians(h23, ListLogger(), model23, lambda: FixedBatches(batches, tgpt.TrainingClock()))
    assert torch.equal(hessians["bigram.embed.weight"], torch.eye(64))
    assert torch.equal(hessians["ve_shared.embed.weight"], torch.eye(64))
    _, meta = tgpt.quantize_state_dict(tgpt.unbank_state_dict(model23.state_dict()), h23, hessians)
    assert meta["bigram.embed.weight"] == {"type": "int6"}
    assert meta["tok_emb.weight"] == {"type": "int8"}


# ---- kernels at the recipe's shapes ----

@pytest.mark.parametrize("backend,repeat", [("fa3", 1), ("cudnn", 2)])
def test_kernel_probes_run_at_the_model_shapes(tgpt, monkeypatch, backend, repeat):
    """On CUDA the start-up probes get the model's head counts, the GQA repeat the attention backend uses and the
    MLP width (2048 for the 2026-04-09 model), not a fixed small shape."""
    require_triton()  # without triton the kernels fall back to PyTorch, and the probes are not run
    seen = {}
    monkeypatch.setattr(tgpt, "select_attention_backend", lambda h, dist_info: (backend, "test"))
    monkeypatch.setattr(tgpt, "_probe_qk_kernel", lambda *args: seen.setdefault("qk", args))
    monkeypatch.setattr(tgpt, "_probe_mlp_kernel", lambda *args: seen.setdefault("mlp", args))
    device = torch.device("cuda", 0)
    kernels = tgpt.select_kernels(tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"}),
                                  tgpt.DistInfo(0, 1, device))
    assert kernels["qk"] == kernels["mlp"] == ("triton", "auto")
    assert seen == {"qk": (64, 16, device, 8, 4, repeat), "mlp": (512, device, 2048)}


# The whole pipeline (the recipe's tiny preset through run.sh, its loader, looping, GPTQ, artifact and evals) runs
# once, for its tests there, in tests/test_run_sh_recipes.py.
