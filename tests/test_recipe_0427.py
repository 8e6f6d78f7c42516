"""RECIPE=2026-04-27, model side (SPEC_0427 §4, §11, §12): the recipe table, the full-size parameter
count and dtypes, the same-seed initial weights of the record's draw order (§12), the BOS-masked
SmearGate, the sparse attention gate and the two-lane decoder against a forward written from the spec, the GPTQ
Hessians of that forward (attn.proj's input after the gate) and the settings' checks. The tiny pipeline on the CPU:
tests/test_run_sh_recipes.py."""
import math
import re

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tgpt_util import TINY_0427_ENV, tgpt  # noqa: F401 (fixture)

CPU = torch.device("cpu")

# SPEC_0427 §11 (the record's run, §1's command) for every setting this trainer has; then our deliberate choices.
SPEC_0427 = {
    "NUM_LAYERS": 11, "MODEL_DIM": 512, "NUM_HEADS": 8, "NUM_KV_HEADS": 4, "MLP_MULT": 4.0, "VOCAB_SIZE": 8192,
    "TIE_EMBEDDINGS": True, "LOGIT_SOFTCAP": 30.0, "ROPE_DIMS": 16, "ROPE_BASE": 10000.0, "LN_SCALE": True,
    "XSA_LAST_N": 11, "SKIP_GATES_ENABLED": True, "NUM_LOOPS": 2, "LOOP_START": 3, "LOOP_END": 5,
    "ENABLE_LOOPING_AT": 0.35, "PARALLEL_START_LAYER": 8, "PARALLEL_RESIDUAL_START": -1, "QK_GAIN_INIT": 5.0,
    "SMEAR_GATE_ENABLED": True, "SMEAR_GATE_BOS_MASK": True, "GATE_WINDOW": 12, "SPARSE_ATTN_GATE_ENABLED": True,
    "SPARSE_ATTN_GATE_SCALE": 0.5, "MATRIX_LR": 0.026, "SCALAR_LR": 0.02, "TIED_EMBED_LR": 0.03,
    "MUON_MOMENTUM": 0.97, "MUON_MOMENTUM_WARMUP_START": 0.92, "MUON_MOMENTUM_WARMUP_STEPS": 1500,
    "MUON_BACKEND_STEPS": 5, "MUON_ROW_NORMALIZE": True, "MUON_WD": 0.095, "ADAM_WD": 0.02, "EMBED_WD": 0.085,
    "BETA1": 0.9, "BETA2": 0.99, "ADAM_EPS": 1e-8, "GRAD_CLIP_NORM": 0.3, "WARMDOWN_FRAC": 0.85,
    "WARMDOWN_ITERS": 0, "MIN_LR": 0.1, "WARMUP_STEPS": 20, "ITERATIONS": 20000, "MAX_WALLCLOCK_SECONDS": 600.0,
    "EMA_DECAY": 0.9965, "VAL_LOSS_EVERY": 0, "TRAIN_LOG_EVERY": 500, "TRAIN_BATCH_TOKENS": 786432,
    "TRAIN_SEQ_LEN": 2048, "EVAL_SEQ_LEN": 2048, "VAL_BATCH_SIZE": 524288, "GPTQ_CALIBRATION_BATCHES": 16,
    "MATRIX_BITS": 6, "EMBED_BITS": 7, "EMBED_CLIP_SIGMAS": 14.0, "QUANTIZER": "gptq", "TTT_ENABLED": True,
    "TTT_MODE": "lora_phased", "TTT_LORA_RANK": 80, "TTT_LORA_ALPHA": 144.0, "TTT_LORA_LR": 1e-4, "TTT_LORA_WD": 0.5,
    "TTT_DOC_BATCH": 64, "TTT_LORA_CHUNK": 48, "TTT_PHASE_DOCS": "833,1666,2500", "TTT_LR": 0.001,
    "TTT_MOMENTUM": 0.9, "TTT_EPOCHS": 1, "TTT_CHUNK_TOKENS": 32768, "TTT_BATCH_SEQS": 32, "TTT_GRAD_CLIP": 1.0,
    "MLP_CLIP_SIGMAS": 11.5, "ATTN_CLIP_SIGMAS": 13.0, "ATTN_GATE_INT8": True, "LQER_RANK": 4, "LQER_TOP_K": 3,
    "LQER_GROUP": 64,
    "TIED_EMBED_INIT_STD": 0.005, "BIGRAM_ENABLED": False, "SMEAR_ENABLED": False, "VE_ENABLED": False,
    "TRAIN_LOADER": "documents", "GPTQ_CALIBRATION_LOADER": "shuffled", "ROPE_NTK": False,  # §3, §8.1, §0.15
    "DATA_PATH": "./data/datasets/fineweb10B_sp8192_lossless_caps_caseops_v1_reserved",
    "TOKENIZER_PATH": "./data/tokenizers/fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model",
    # docs/SPEC_0427.md §0 and docs/recipe_0427.md: the Hessians inside the cap (§0.4); the record's local clipping
    # (§0.11) and bf16 Muon buffers (§6.2-§6.3); banks, so no nn.Linear draws, and every MLP-up after every
    # attention matrix (§12); bf16 theta as the record's buffer
    "GPTQ_RESERVE_SECONDS": 8.0, "GRAD_CLIP_SCOPE": "local", "MUON_DTYPE": "bf16", "INIT_LINEAR_DRAWS": False,
    "INIT_MLP_AFTER_ATTENTION": True, "ROPE_BF16": True,
    "CONTROL_TENSOR_NAME_PATTERNS": "attn_scale,attn_scales,mlp_scale,mlp_scales,resid_mix,resid_mixes,q_gain,"
                                    "skip_weight,skip_weights,skip_gates,parallel_post_lambdas,"
                                    "parallel_resid_lambdas,attn_gate_w,smear_gate,smear_lambda"}
NEW_PARAMS = {"smear_gate.weight": (1, 12), "smear_lambda": (1,), "parallel_post_lambdas": (11, 2, 2),
              "parallel_resid_lambdas": (11, 2), **{f"blocks.{i}.attn.attn_gate_w": (8, 12) for i in range(11)}}


def tiny(tg, **env):
    return tg.Hyperparameters.from_env(dict(TINY_0427_ENV, **{k: str(v) for k, v in env.items()}))


# ---- the recipe table and the settings ----

def test_recipe_gives_spec_0427_run_values_and_the_environment_overrides_them(tgpt):
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27"})
    assert {name: getattr(h, name.lower()) for name in SPEC_0427} == SPEC_0427
    assert set(tgpt.RECIPES["2026-04-27"]) <= {f.name for f in tgpt.fields(tgpt.Hyperparameters)}
    assert h.train_budget_ms == 592_000.0
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27", "PARALLEL_START_LAYER": "-1", "QK_GAIN_INIT": "5.25",
                                       "SMEAR_GATE_BOS_MASK": "0", "GPTQ_RESERVE_SECONDS": "0.5"})
    assert (h.parallel_start_layer, h.qk_gain_init, h.smear_gate_bos_mask, h.gptq_reserve_seconds) == (
        -1, 5.25, False, 0.5)
    assert tgpt.RECIPES["2026-04-09"]["parallel_residual_start"] == 7  # 04-09's table is unchanged by 04-27's
    help_text = tgpt.settings_help()
    assert re.search(r"PARALLEL_START_LAYER +int .*SPEC_0427.*\[default: -1\] \[2026-04-27: 8\]", help_text)
    assert re.search(r"SMEAR_GATE_ENABLED +bool .*\[default: False\] \[2026-04-27: True\]", help_text)


def test_the_new_settings_are_checked_at_start_up(tgpt):
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27", "PARALLEL_RESIDUAL_START": "7", "GATE_WINDOW": "513"})
    assert sorted(info.value.errors) == [
        "GATE_WINDOW=513 must be in [1, MODEL_DIM=512]",
        "PARALLEL_RESIDUAL_START=7 and PARALLEL_START_LAYER=8: set one of them (the other to -1)"]
    # two lanes run in the decoder's tail: not in the encoder, not in (or before) the looped blocks
    for env in ({"PARALLEL_START_LAYER": "4"}, {"PARALLEL_START_LAYER": "6", "LOOP_END": "7"}):
        with pytest.raises(tgpt.ConfigError, match="PARALLEL_START_LAYER=%s: two lanes run in the decoder's tail"
                           % env["PARALLEL_START_LAYER"]):
            tgpt.Hyperparameters.from_env(dict(env, RECIPE="2026-04-27"))
    assert tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27", "PARALLEL_START_LAYER": "6"}).parallel_start_layer
    assert tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27", "NUM_LOOPS": "0", "PARALLEL_START_LAYER": "5"})
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"SMEAR_GATE_BOS_MASK": "0", "GATE_WINDOW": "0"})  # GATE_WINDOW unread: no error
    assert info.value.errors == ["SMEAR_GATE_BOS_MASK=0 applies to SMEAR_GATE_ENABLED=1 only"]


# ---- the model at full size (SPEC_0427 §4) ----

def test_full_size_model_has_the_record_parameter_count_names_and_dtypes(tgpt):
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27"})
    with torch.device("meta"):
        model = tgpt.GPT(h)
    assert sum(p.numel() for p in model.parameters()) == 35_945_671  # 04-09's 35,944,536 + 66 + 1,056 + 13
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters()}
    assert {name: shapes[name] for name in NEW_PARAMS} == NEW_PARAMS
    assert [block.two_lanes for block in model.blocks] == [False] * 8 + [True] * 3
    assert not any(block.parallel for block in model.blocks) and model.smear is None
    tgpt.apply_dtype_recipe(model, h)
    assert {name for name, p in model.named_parameters() if p.dtype == torch.bfloat16} == {"tok_emb.weight"}
    # without the control patterns the 2-D and 3-D gates and lambdas would be bf16 like tok_emb
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27", "CONTROL_TENSOR_NAME_PATTERNS": "resid_mix"})
    with torch.device("meta"):
        model = tgpt.apply_dtype_recipe(tgpt.GPT(h), h)
    assert {name for name in NEW_PARAMS if len(NEW_PARAMS[name]) > 1} <= {
        name for name, p in model.named_parameters() if p.dtype == torch.bfloat16}
    with torch.device("meta"):  # 04-09's model is unchanged: 35,944,536 parameters, one lane from block 7
        model = tgpt.GPT(tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"}))
    assert sum(p.numel() for p in model.parameters()) == 35_944_536 and not any(b.two_lanes for b in model.blocks)


def spec_0427_initial_state(h) -> tuple:
    """SPEC_0427 §12's list, step by step, on torch's CPU generator after manual_seed(SEED): (1) the Embedding's
    default N(0, 1); (2)-(3) blocks, skips and lambdas draw nothing; (4) the smear gate, an nn.Linear(12, 1): 12
    kaiming-uniform(a = sqrt 5) draws, i.e. U(+-1/sqrt(12)), zeroed later; (5) tok_emb ~ N(0, std^2); one loop over
    the layers: orthogonal Q_i, O_i = 0, orthogonal K_i, orthogonal V_i; a second loop: orthogonal up_i, down_i = 0.
    -> (the weights by name, generator state after)."""
    n, d, window = h.num_layers, h.model_dim, h.gate_window
    kv, hidden = h.num_kv_heads * d // h.num_heads, int(h.mlp_mult * d)
    torch.manual_seed(h.seed)
    state = {"tok_emb.weight": torch.empty(h.vocab_size, d).normal_()}  # (1)
    torch.empty(1, window).uniform_(-1 / math.sqrt(window), 1 / math.sqrt(window))  # (4): the draws only
    state["tok_emb.weight"].normal_(0.0, h.tied_embed_init_std)  # (5)
    for i in range(n):
        state[f"blocks.{i}.attn.c_q.weight"] = nn.init.orthogonal_(torch.empty(d, d))
        state[f"blocks.{i}.attn.proj.weight"] = torch.zeros(d, d)
        state[f"blocks.{i}.attn.c_k.weight"] = nn.init.orthogonal_(torch.empty(kv, d))
        state[f"blocks.{i}.attn.c_v.weight"] = nn.init.orthogonal_(torch.empty(kv, d))
    for i in range(n):
        state[f"blocks.{i}.mlp.fc.weight"] = nn.init.orthogonal_(torch.empty(hidden, d))
        state[f"blocks.{i}.mlp.proj.weight"] = torch.zeros(d, hidden)
    for i in range(n):  # (2), (3): constants
        state[f"blocks.{i}.attn.attn_gate_w"] = torch.zeros(h.num_heads, window)
    state.update({"smear_gate.weight": torch.zeros(1, window), "smear_lambda": torch.zeros(1),
                  "parallel_post_lambdas": torch.ones(n, 2, 2), "parallel_resid_lambdas": torch.full((n, 2), 1.1)})
    return state, torch.get_rng_state()


def test_same_seed_gives_the_records_draw_order(tgpt):
    """Every initial tensor bit for bit, and not one draw more or less, at two seeds."""
    for seed in (42, 7):
        h = tiny(tgpt, MODEL_DIM=128, SEED=seed)
        model = tgpt.build_model(h, CPU)
        after_build = torch.get_rng_state()
        expected, after_spec = spec_0427_initial_state(h)
        flat = tgpt.unbank_state_dict(model.state_dict())
        assert set(expected) <= set(flat)
        assert [name for name in expected if not torch.equal(flat[name], expected[name])] == []
        assert torch.equal(after_build, after_spec)
    # so the test sees the order: 04-09's per-layer loop, and its nn.Linear draws, give other matrices
    for env in ({"INIT_MLP_AFTER_ATTENTION": 0}, {"INIT_LINEAR_DRAWS": 1}, {"SMEAR_GATE_ENABLED": 0}):
        other = tgpt.build_model(tiny(tgpt, MODEL_DIM=128, SEED=7, **env), CPU)
        assert not torch.equal(other.mlp_up_bank, model.mlp_up_bank)


# ---- the forward (SPEC_0427 §4) ----

def randomized(tg, h, seed=0):
    """The tiny 04-27 model with every parameter random (gates, lambdas, W_o and W_down included)."""
    model = tg.build_model(h, CPU)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            small = name in ("tok_emb.weight",) or name.endswith("_bank")
            param.add_(torch.randn(param.shape, generator=generator) * (0.05 if small else 0.5))
    return model


def token_ids(h, seed, rows=2, length=32):
    """Random tokens with a BOS (id 1) at the start of each row and inside it, as in packed training rows."""
    ids = torch.randint(2, h.vocab_size, (rows, length), generator=torch.Generator().manual_seed(seed))
    ids[:, 0] = ids[0, 9] = ids[1, 20] = ids[1, 21] = 1
    return ids


def spec_0427_forward(tg, h, model, ids, looping, inputs=None, variant=""):
    """SPEC_0427 §4's forward written out from `model`'s weights: SmearGate (BOS-masked) on the embedding, rms, x0;
    04-09's layer lists, skips and sequential blocks; attention with q/k norm, partial RoPE, q gain, XSA, then the
    sparse gate per head; two lanes from PARALLEL_START_LAYER (at the first such layer lane0 = lane1 = x, then a skip,
    if any, goes into lane 0 only; attention reads lane 0 mixed with x0, the MLP lane 1; lane k = r_k lane k +
    P_0k a + P_1k b); the lanes' mean; soft-capped tied logits. `inputs` collects each matrix's input by name.
    `variant` changes one detail, so the test can see the reference is sensitive to it: "no_bos_mask",
    "skip_into_lane1", "post_transposed", "lanes_after_skip" (both lanes start from x after the first skip)."""
    n, d = h.num_layers, h.model_dim
    heads, kv_heads, head_dim = h.num_heads, h.num_kv_heads, d // h.num_heads
    window, start = h.gate_window, h.parallel_start_layer
    order = list(range(n))
    if looping:
        segment = list(range(h.loop_start, h.loop_end + 1))
        order = order[:h.loop_start] + segment * (h.num_loops + 1) + order[h.loop_end + 1:]
    encoder, decoder = order[:len(order) // 2], order[len(order) // 2:]
    rope = model.rope_tables(ids.size(1), CPU, torch.float32)
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
        y = (y - (y * unit).sum(-1, keepdim=True) * unit).reshape(batch, seq_len, heads, head_dim)
        gate_w = model.blocks[i].attn.attn_gate_w
        y = torch.stack([y[:, :, head] * torch.sigmoid(h.sparse_attn_gate_scale * (x[..., :window] @ gate_w[head]))
                         [..., None] for head in range(heads)], dim=2).reshape(batch, seq_len, d)
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
        x_mid = x_in + b.attn_scale * attention(i, rms(x_in) * f)
        return x_mid + b.mlp_scale * mlp(i, rms(x_mid) * f)

    def two_lane_block(i, lane0, lane1):
        b, f = model.blocks[i], 1.0 / math.sqrt(i + 1)
        r, post = model.parallel_resid_lambdas[i], model.parallel_post_lambdas[i]
        post = post.T if variant == "post_transposed" else post
        a = b.attn_scale * attention(i, rms(b.resid_mix[0] * lane0 + b.resid_mix[1] * x0) * f)
        m = b.mlp_scale * mlp(i, rms(lane1) * f)
        return r[0] * lane0 + post[0, 0] * a + post[1, 0] * m, r[1] * lane1 + post[0, 1] * a + post[1, 1] * m

    e = model.tok_emb.weight[ids]
    smeared = [e[:, 0]]
    for t in range(1, seq_len):
        g = model.smear_lambda * torch.sigmoid(e[:, t, :window] @ model.smear_gate.weight[0])
        keep = (ids[:, t] != 1).float() if variant != "no_bos_mask" else torch.ones(batch)
        smeared.append(e[:, t] + (g * keep)[:, None] * e[:, t - 1])
    x = x0 = rms(torch.stack(smeared, dim=1))
    stack, lanes = [], None
    for i in encoder:
        x = block(i, x)
        stack.append(x)
    for j, i in enumerate(decoder):
        if i >= start and lanes is None and variant != "lanes_after_skip":
            lanes = (x, x)
        if j < model.skip_weights.size(0) and stack:
            gate, skip = torch.sigmoid(model.skip_gates[j]), model.skip_weights[j] * stack.pop()
            if lanes is not None and variant == "skip_into_lane1":
                lanes = (lanes[0], gate * lanes[1] + (1 - gate) * skip)
            elif lanes is not None:
                lanes = (gate * lanes[0] + (1 - gate) * skip, lanes[1])
            else:
                x = gate * x + (1 - gate) * skip
        if i >= start:
            lanes = two_lane_block(i, *(lanes or (x, x)))
        else:
            x = block(i, x)
    x = (lanes[0] + lanes[1]) / 2
    record("tok_emb.weight", rms(x))
    return h.logit_softcap * torch.tanh(rms(x) @ model.tok_emb.weight.T / h.logit_softcap)


@pytest.mark.parametrize("looping", [False, True])
def test_forward_is_spec_0427_forward(tgpt, looping):
    """The model (SmearGate, sparse gate, two lanes with their skips, looped or not) against the reference; the
    reference tells apart the BOS mask, the lane a skip goes into and the direction of the post lambdas."""
    h = tiny(tgpt)
    model = randomized(tgpt, h)
    model.looping = looping
    ids = token_ids(h, 1)
    encoder, decoder = tgpt.layer_orders(h)[looping]
    first_two_lane = next(j for j, i in enumerate(decoder) if i >= h.parallel_start_layer)
    assert first_two_lane < min(len(encoder), model.skip_weights.size(0))  # it gets a skip, with a weight not 0
    assert model.skip_weights[first_two_lane].abs().min() > 0
    with torch.no_grad():
        got = model.logits_from_hidden(model.forward_hidden(ids))
        want = spec_0427_forward(tgpt, h, model, ids, looping)
        assert (got - want).abs().max() < 2e-5
        for variant in ("no_bos_mask", "skip_into_lane1", "post_transposed", "lanes_after_skip"):
            assert (spec_0427_forward(tgpt, h, model, ids, looping, variant=variant) - want).abs().max() > 1e-3
        # each new feature changes the output (so the agreement covers it)
        model.smear_lambda.zero_()
        assert (model.logits_from_hidden(model.forward_hidden(ids)) - got).abs().max() > 1e-2
        model.blocks[3].attn.attn_gate_w.fill_(1e3)  # gate 1 on every head of block 3
        assert (model.logits_from_hidden(model.forward_hidden(ids)) - got).abs().max() > 1e-2


def test_smear_gate_bos_mask_keeps_documents_apart(tgpt):
    """x_t += lam sigmoid(w x_t[:12]) x_{t-1} for t >= 1; with the mask a BOS (a document's first token) keeps its
    embedding whatever the previous document's last token is; without it (PR #1797) it takes a share of it."""
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(2, 50, (2, 24), generator=generator)
    ids[0, 7] = ids[1, 0] = ids[1, 13] = 1
    bos = ids == 1
    x = torch.randn(2, 24, 32, generator=generator)
    lam = torch.tensor([0.8])
    for bos_mask in (True, False):
        gate = tgpt.TokenSmearGate(12, bos_mask)
        with torch.no_grad():
            gate.weight.copy_(torch.randn(1, 12, generator=generator))
        out = gate(x, ids, lam)
        g = lam * torch.sigmoid(x[:, 1:, :12] @ gate.weight[0])
        if bos_mask:
            g = g * ~bos[:, 1:]
        assert torch.allclose(out[:, 1:], x[:, 1:] + g[..., None] * x[:, :-1], atol=1e-6)
        assert torch.equal(out[:, 0], x[:, 0])
        changed = x.clone()
        changed[0, 6], changed[1, 12] = torch.randn(2, 32, generator=generator)  # the tokens before two BOS
        moved = (gate(changed, ids, lam) - out).abs().amax(dim=-1)
        assert bool((moved[bos] == 0).all()) is bos_mask
        assert moved[0, 6] > 0 and moved[1, 12] > 0  # the changed tokens themselves
    # the model's x0 (the blocks' input): a BOS after different tokens gets the same one, with the mask only
    model, x0 = randomized(tgpt, tiny(tgpt)), []
    model.blocks[0].register_forward_pre_hook(lambda module, args: x0.append(args[1]))
    with torch.no_grad():
        for bos_mask in (True, False):
            model.smear_gate.bos_mask = bos_mask
            model.forward_hidden(torch.tensor([[5, 9, 1, 7, 8], [5, 3, 1, 7, 8]]))
            assert torch.equal(x0[-1][0, 2], x0[-1][1, 2]) is bos_mask and torch.equal(x0[-1][0, 0], x0[-1][1, 0])


class Inputs(dict):
    """A collector that keeps each matrix's input itself (not its X^T X)."""

    def add(self, x, *names):
        self.update((name, x) for name in names)


def test_sparse_attention_gate_scales_each_head_by_its_gate(tgpt):
    """Head h's XSA'd output (attn.proj's input, the one the Hessian sees) times sigmoid(0.5 W_h x[:12]), x the
    attention input: gate 1, gate 0, W = 0 halves the head, and a random W_h at the SCALE 0.5."""
    h = tiny(tgpt)
    model = randomized(tgpt, h)
    attn, weights = model.blocks[2].attn, model.layer_weights(2)
    generator = torch.Generator().manual_seed(4)
    x = torch.randn(2, 16, 64, generator=generator).abs()  # x[:12] . W_h has the sign of W_h's entries
    rope = model.rope_tables(16, CPU, torch.float32) + (None,)  # no cu_seqlens: dense rows

    def proj_input():
        seen = Inputs()
        out = attn(x, *weights[:4], rope, None, seen)
        return seen["blocks.2.attn.proj.weight"], out
    with torch.no_grad():
        gate_w = attn.attn_gate_w
        attn.attn_gate_w = None
        plain, _ = proj_input()
        attn.attn_gate_w = gate_w
        random_row = torch.randn(12, generator=generator)
        gate_w.copy_(torch.stack((torch.full((12,), 1e3), torch.full((12,), -1e3), torch.zeros(12), random_row)))
        gated, out = proj_input()
    scale = torch.ones(2, 16, 4)
    scale[..., 1], scale[..., 2] = 0.0, 0.5
    scale[..., 3] = torch.sigmoid(0.5 * x[..., :12] @ random_row)
    assert torch.allclose(gated, (plain.view(2, 16, 4, 16) * scale[..., None]).view(2, 16, 64), atol=1e-6)
    assert torch.allclose(out, F.linear(gated, weights[3]), atol=1e-6)


# ---- GPTQ calibration (SPEC_0427 §8.1) ----

def test_hessians_are_x_transpose_x_of_the_spec_inputs(tgpt):
    """Looped: the collector's sums through the model == X^T X of the inputs the reference hands each matrix: c_q,
    c_k, c_v the attention input, attn.proj the XSA'd output AFTER the sparse gate, fc the MLP input (two-lane
    blocks: rms(lane 1) f), mlp.proj leaky(h)^2, tok_emb the final norm of the lanes' mean; blocks 2, 3 three times."""
    h = tiny(tgpt)
    model = randomized(tgpt, h)
    model.looping = True
    ids = token_ids(h, 6)
    collector, inputs = tgpt.HessianCollector(), {}
    with torch.no_grad():
        collector.add(tgpt.rms_norm(model.forward_hidden(ids, collector)), "tok_emb.weight")
        spec_0427_forward(tgpt, h, model, ids, True, inputs=inputs)
    assert len(collector) == 37 and len(inputs["blocks.3.attn.proj.weight"]) == 3
    for name, sums in collector.items():
        spec_name = re.sub(r"attn\.c_[kv]", "attn.c_q", name)
        want = sum(x.reshape(-1, x.size(-1)).double().T @ x.reshape(-1, x.size(-1)).double()
                   for x in inputs[spec_name])
        assert torch.allclose(sums.double(), want, rtol=1e-4, atol=1e-4 * want.abs().max().item()), name


# The whole pipeline (the recipe's tiny preset through run.sh on CaseOps data, its documents loader, looping, GPTQ,
# artifact and phased TTT) runs once, for its tests there, in tests/test_run_sh_recipes.py.
