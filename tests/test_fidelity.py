"""Record fidelity: the record's own command gives the record's model. The CUDA dtype recipe against
SPEC §4's table, same-seed init against an independent reference written from SPEC §4, the weight average applied
for each (EMA_ENABLED, SWA_ENABLED), SWA snapshots that copy, late QAT kept into TTT training, the eval lengths of
SPEC §8, and the record's exact env line (SPEC §1, scaled to a tiny model) through the real trainer."""
import math
import random
import types

import numpy as np
import pytest
import torch
from torch import nn

from test_eval import ListLogger, random_model, reference_sliding, tiny_h, validation_data
from tgpt_util import TINY_MODEL_ENV, tgpt, tiny_data, tiny_data_short_val, write_shard  # noqa: F401 (fixtures)

CPU = torch.device("cpu")
SPEC_BF16 = {"tok_emb.weight", "bigram.embed.weight", "ve_shared.embed.weight"}  # SPEC §4 "Dtypes": all else fp32

# TINY_MODEL_ENV with every projection >= 64 wide (bigram 128x64, ve 64x64), so the record's "both dims >= 64"
# orthogonal rule (SPEC §4) applies as at full size.
SCALED_MODEL_ENV = dict(TINY_MODEL_ENV, MODEL_DIM="128", BIGRAM_DIM="64", VE_DIM="64")

# SPEC §1's Record column: the record's published run command, LATE_QAT=1 (read by nothing) included.
RECORD_ENV_LINE = {
    "NUM_LAYERS": "11", "XSA_LAST_N": "4", "ROPE_DIMS": "16", "LN_SCALE": "1", "BIGRAM_VOCAB_SIZE": "1536",
    "EMA_ENABLED": "1", "EMA_DECAY": "0.997", "LATE_QAT": "1", "SWA_ENABLED": "1", "SWA_EVERY": "50",
    "LATE_QAT_THRESHOLD": "0.15", "VE_ENABLED": "1", "VE_DIM": "128", "VE_LAYERS": "9,10", "TTT_ENABLED": "1",
    "TTT_LR": "0.002", "TTT_EPOCHS": "3", "TTT_CHUNK_TOKENS": "32768", "TTT_FREEZE_BLOCKS": "0",
    "TTT_MOMENTUM": "0.9", "TTT_BATCH_SEQS": "32", "TTT_GRAD_CLIP": "1.0", "MUON_WD": "0.04", "ADAM_WD": "0.04",
    "MATRIX_LR": "0.025", "SCALAR_LR": "0.025", "TIED_EMBED_LR": "0.035", "MUON_MOMENTUM": "0.99",
    "MUON_MOMENTUM_WARMUP_START": "0.92", "MUON_MOMENTUM_WARMUP_STEPS": "1500", "WARMDOWN_ITERS": "3500",
    "ITERATIONS": "9000", "MAX_WALLCLOCK_SECONDS": "600", "EVAL_STRIDE": "64", "SEED": "1337"}
# Scaled to the CPU: the model (SCALED_MODEL_ENV), 12 steps whose warmdown by iterations passes the late-QAT
# threshold (at step 10) and the SWA condition (steps 10 and 12), and the eval sizes of a 64-token window.
RECORD_LINE_SCALED = dict(
    SCALED_MODEL_ENV, SWA_EVERY="2", ITERATIONS="12", WARMDOWN_ITERS="20", MAX_WALLCLOCK_SECONDS="0",
    TTT_CHUNK_TOKENS="1024", EVAL_STRIDE="16", VAL_LOSS_EVERY="0", TRAIN_LOG_EVERY="1", RUN_ID="record_line")


def scaled_hparams(tg, **env):
    return tg.Hyperparameters.from_env(dict(SCALED_MODEL_ENV, **env))


# ---- dtypes (SPEC §4) ----

def test_cuda_dtype_recipe_gives_spec_table_and_keeps_control_tensors_fp32(tgpt):
    h = tgpt.Hyperparameters()
    with torch.device("meta"):
        model = tgpt.GPT(h)
    tgpt.apply_dtype_recipe(model, h)
    dtypes = {name: p.dtype for name, p in model.named_parameters()}
    assert {name for name, dtype in dtypes.items() if dtype == torch.bfloat16} == SPEC_BF16
    assert {dtype for name, dtype in dtypes.items() if name not in SPEC_BF16} == {torch.float32}
    assert dtypes["skip_weights"] == dtypes["blocks.3.resid_mix"] == torch.float32  # 2-D, fp32 by pattern only
    # The rule is driven by CONTROL_TENSOR_NAME_PATTERNS: without resid_mix/skip_weight entries they are bf16.
    h = tgpt.Hyperparameters(control_tensor_name_patterns="attn_scale,mlp_scale,q_gain")
    with torch.device("meta"):
        model = tgpt.apply_dtype_recipe(tgpt.GPT(h), h)
    bf16 = {name for name, p in model.named_parameters() if p.dtype == torch.bfloat16}
    assert bf16 == SPEC_BF16 | {"skip_weights"} | {"blocks.%d.resid_mix" % i for i in range(h.num_layers)}


# ---- same seed, same init (SPEC §4) ----

def spec_initial_state(h) -> tuple:
    """SPEC §4's initialisation written from the spec alone: torch's CPU generator consumed in the record's
    order (construction draws, then tok_emb, the banks layer by layer, then the >= 64-wide projections), plus
    the constant fills. Returns (state dict, generator state after the last draw)."""
    n, d, heads = h.num_layers, h.model_dim, h.num_heads
    kv, hidden = h.num_kv_heads * (d // heads), int(h.mlp_mult * d)

    def linear_default(out_features, in_features):  # nn.Linear's own init: kaiming-uniform(a=sqrt(5))
        weight = torch.empty(out_features, in_features)
        nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
        return weight

    torch.manual_seed(h.seed)
    tok = torch.empty(h.vocab_size, d).normal_()  # 1. construction: nn.Embedding's N(0, 1) ...
    bigram_embed = torch.empty(h.bigram_vocab_size, h.bigram_dim).normal_().zero_()
    bigram_proj = linear_default(d, h.bigram_dim).zero_()
    ve_embed = torch.empty(h.vocab_size, h.ve_dim).normal_().normal_(0.0, 0.01)  # overwritten at construction
    ve_proj = linear_default(kv, h.ve_dim).zero_()
    tok.normal_(0.0, h.tied_embed_init_std)  # 2. then tok_emb, the banks, the projections
    qo, kv_bank = torch.zeros(2 * n, d, d), torch.zeros(2 * n, kv, d)
    up, down = torch.zeros(n, hidden, d), torch.zeros(n, d, hidden)
    for i in range(n):
        for weight in (qo[i], kv_bank[i], kv_bank[n + i], up[i]):
            nn.init.orthogonal_(weight)
    for weight in (bigram_proj, ve_proj):
        if min(weight.shape) >= 64:
            nn.init.orthogonal_(weight)
    state = {"tok_emb.weight": tok, "bigram.embed.weight": bigram_embed, "bigram.proj.weight": bigram_proj,
             "bigram.scale": torch.tensor(0.05), "smear.gate": torch.zeros(d), "skip_weights": torch.ones(n // 2, d),
             "qo_bank": qo, "kv_bank": kv_bank, "mlp_up_bank": up, "mlp_down_bank": down,
             "ve_shared.embed.weight": ve_embed, "ve_shared.proj.weight": ve_proj, "ve_shared.scale": torch.tensor(0.1)}
    for i in range(n):
        state.update({f"blocks.{i}.attn.q_gain": torch.full((heads,), h.qk_gain_init),
                      f"blocks.{i}.attn_scale": torch.ones(d), f"blocks.{i}.mlp_scale": torch.ones(d),
                      f"blocks.{i}.resid_mix": torch.stack((torch.ones(d), torch.zeros(d)))})
    state.update({f"ve_layer_scales.{j}": torch.ones(1) for j in range(len(h.ve_layer_indices))})
    return state, torch.get_rng_state()


def assert_spec_initial_state(h, state) -> None:
    expected, _ = spec_initial_state(h)
    assert sorted(state) == sorted(expected)
    different = [name for name in expected if not torch.equal(state[name], expected[name])]
    assert different == [], different


def test_same_seed_gives_the_spec_initial_weights_bit_for_bit(tgpt):
    h = scaled_hparams(tgpt, SEED="1337")
    model = tgpt.build_model(h, CPU)
    python_next, numpy_next, generator_after_build = random.random(), np.random.random(), torch.get_rng_state()
    expected, generator_after_spec = spec_initial_state(h)
    assert_spec_initial_state(h, model.state_dict())
    assert torch.equal(generator_after_build, generator_after_spec)  # no draw more or less than the record's
    # Python and NumPy are seeded with SEED before the build and nothing in it draws from them (SPEC §4).
    assert python_next == random.Random(1337).random() and numpy_next == np.random.RandomState(1337).random_sample()
    assert not torch.equal(tgpt.build_model(scaled_hparams(tgpt, SEED="42"), CPU).qo_bank, model.qo_bank)


def test_projections_narrower_than_64_are_orthogonal_too(tgpt):
    """The record's rule would leave them zero; a zero bigram.proj beside the zero bigram.embed never trains
    (README, what differs). Both are 16 wide in the tiny model."""
    model = tgpt.build_model(tgpt.Hyperparameters.from_env(dict(TINY_MODEL_ENV)), CPU)
    for weight in (model.bigram.proj.weight, model.ve_shared.proj.weight):
        assert torch.allclose(weight.T @ weight, torch.eye(weight.size(1)), atol=1e-5)


# ---- weight averages (SPEC §6) ----

@pytest.mark.parametrize("ema,swa,kind,lines", [
    (True, False, "ema", ["ema:applying EMA weights"]),
    (True, True, "ema", ["ema:applying EMA weights"]),  # the record's command: EMA, and no SWA snapshot taken
    (False, True, "swa", ["swa:applying SWA weights snapshots:2"]),
    (False, False, "raw", ["ema:disabled keeping the trained weights"])])
def test_applied_weight_average_for_each_ema_and_swa_setting(tgpt, ema, swa, kind, lines):
    h = tiny_h(tgpt, ema_enabled=ema, swa_enabled=swa, swa_every=5)
    model = random_model(tgpt, h)
    averages = tgpt.WeightAverages(h, model)
    for value, step in ((1.0, 5), (2.0, 10)):  # two SWA steps (LR scale < 0.2), weights 1 then 2
        with torch.no_grad():
            for param in model.parameters():
                param.fill_(value)
        averages.maybe_accumulate_swa(step, 0.1)
    assert averages.swa_count == (2 if kind == "swa" else 0)
    if ema:
        averages.ema = {k: torch.full_like(v, 0.25) for k, v in averages.ema.items()}
    logger = ListLogger()
    assert tgpt.apply_weight_average(logger, model, averages) == kind and logger.lines == lines
    expected = {"ema": 0.25, "swa": 1.5, "raw": 2.0}[kind]
    assert all((p == expected).all() for p in model.parameters())


def test_swa_without_snapshots_keeps_the_trained_weights(tgpt):
    h = tiny_h(tgpt, ema_enabled=False, swa_enabled=True)
    model = random_model(tgpt, h)
    logger = ListLogger()
    assert tgpt.apply_weight_average(logger, model, tgpt.WeightAverages(h, model)) == "raw"
    assert logger.lines[0].startswith("swa:no_snapshots") and logger.lines[1].startswith("ema:disabled")


def test_swa_snapshots_are_copies_not_the_live_weights(tgpt):
    """fp32 CPU weights: `.float().cpu()` returns the tensor itself, so the first snapshot aliased the weights
    and every later sum doubled them."""
    h = tiny_h(tgpt, ema_enabled=False, swa_enabled=True, swa_every=5)
    model = random_model(tgpt, h)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    averages = tgpt.WeightAverages(h, model)
    assert averages.maybe_accumulate_swa(5, 0.1) is True  # the first snapshot
    assert averages.maybe_accumulate_swa(10, 0.1) is False and averages.swa_count == 2
    assert not averages.maybe_accumulate_swa(11, 0.1) and not averages.maybe_accumulate_swa(15, 0.2)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(torch.equal(averages.swa_sum[k], 2 * before[k]) for k in before)


# ---- late QAT into TTT (SPEC §6) ----

def qat_flags(tg, model) -> tuple:
    return tuple(m.qat_active.item() for m in model.modules() if isinstance(m, tg.CastedLinear))


@pytest.mark.parametrize("qat_at_end", [True, False])
def test_ttt_trains_with_qat_iff_training_ended_with_it(tgpt, monkeypatch, tmp_path, qat_at_end):
    h = tiny_h(tgpt, eval_stride=16)
    model, data = random_model(tgpt, h), validation_data(tgpt, h, 32 * 12)
    model.set_qat(qat_at_end)
    seen, train_on_chunk = [], tgpt.train_on_chunk

    def observed_train_on_chunk(h, dist_info, ttt_model, *args):
        seen.append(qat_flags(tgpt, ttt_model))
        return train_on_chunk(h, dist_info, ttt_model, *args)

    monkeypatch.setattr(tgpt, "train_on_chunk", observed_train_on_chunk)
    tgpt.run_final_evaluation(h, tgpt.DistInfo(0, 1, CPU), ListLogger(), model, tgpt.WeightAverages(h, model),
                              data, 100, lambda: tgpt.build_model(h, CPU), output_dir=str(tmp_path))
    assert len(seen) == 2 and set(seen) == {(float(qat_at_end),) * 2}  # bigram.proj, ve_shared.proj


# ---- eval lengths (SPEC §8) ----

def reference_plain(tg, model, data, seq_len) -> tuple:
    """Non-overlapping seq_len sequences over the validation targets, fp64 sums, one sequence at a time."""
    tokens = torch.from_numpy(data.tokens.astype(np.int64))
    nll = count = byte_count = 0.0
    with torch.no_grad():
        for start in range(0, (tokens.numel() - 1) // seq_len * seq_len, seq_len):
            x, y = tokens[start:start + seq_len][None], tokens[start + 1:start + seq_len + 1][None]
            logits = model.logits_from_hidden(model.forward_hidden(x))
            nll += torch.nn.functional.cross_entropy(logits[0], y[0], reduction="sum").item()
            count += seq_len
            byte_count += data.target_bytes[start:start + seq_len].sum().item()
    return tg.bits_per_byte(nll, count, byte_count)


@pytest.mark.parametrize("train_len,eval_len", [(32, 64), (64, 32)])
def test_round_trip_and_sliding_at_the_eval_length_ttt_at_the_train_length(tgpt, monkeypatch, tmp_path, train_len,
                                                                           eval_len):
    h = tiny_h(tgpt, train_seq_len=train_len, eval_seq_len=eval_len, eval_stride=16, ttt_chunk_tokens=128)
    model, data = random_model(tgpt, h), validation_data(tgpt, h, 64 * 6)
    windows, ttt_sequences, phase = [], [], ["final"]
    build_window_batch, ttt_eval = tgpt.build_window_batch, tgpt.ttt_eval

    def observed_build_window_batch(tokens, window_starts, seq_len, stride):
        windows.append((phase[0], seq_len))
        return build_window_batch(tokens, window_starts, seq_len, stride)

    def observed_ttt_eval(*args):
        phase[0] = "ttt"
        return ttt_eval(*args)

    def make_model():
        fresh = tgpt.build_model(h, CPU)
        forward = fresh.forward

        def observed_forward(x, y):
            if fresh.training:
                ttt_sequences.append(x.size(1))
            return forward(x, y)

        fresh.forward = observed_forward
        return fresh

    monkeypatch.setattr(tgpt, "build_window_batch", observed_build_window_batch)
    monkeypatch.setattr(tgpt, "ttt_eval", observed_ttt_eval)
    results = tgpt.run_final_evaluation(h, tgpt.DistInfo(0, 1, CPU), ListLogger(), model,
                                        tgpt.WeightAverages(h, model), data, 100, make_model, str(tmp_path))
    assert results["post_average"] == pytest.approx(reference_plain(tgpt, model, data, train_len), rel=1e-6)
    reloaded = tgpt.load_artifact_model(str(tmp_path / tgpt.ARTIFACT_FILENAME), lambda: tgpt.build_model(h, CPU))
    at_eval, at_train = (reference_plain(tgpt, reloaded, data, length) for length in (eval_len, train_len))
    assert results["roundtrip"] == pytest.approx(at_eval, rel=1e-6) and at_eval != pytest.approx(at_train, rel=1e-4)
    assert results["final_int6_sliding_window"] == pytest.approx(reference_sliding(tgpt, h, reloaded, data, 16),
                                                                 rel=1e-6)
    assert {length for name, length in windows if name == "final"} == {eval_len}
    assert {length for name, length in windows if name == "ttt"} == {train_len}
    assert ttt_sequences and set(ttt_sequences) == {train_len}


@pytest.mark.parametrize("train_len,eval_len", [(32, 48), (48, 32), (48, 0)])
def test_validation_tokens_are_trimmed_to_whole_sequences_of_the_longer_length(tgpt, tmp_path, train_len, eval_len):
    write_shard(tmp_path / "fineweb_val_000000.bin", np.arange(1000) % 64)
    h = tiny_h(tgpt, train_seq_len=train_len, eval_seq_len=eval_len, data_path=str(tmp_path))
    no_pieces = types.SimpleNamespace(vocab_size=lambda: 0)  # byte tables are not under test here
    val = tgpt.load_validation_data(h, no_pieces, CPU)
    assert val.num_targets == 999 // 48 * 48 == 960


def test_stride_and_chunk_must_fit_the_ttt_window_of_train_length(tgpt):
    tiny_h(tgpt, train_seq_len=32, eval_seq_len=64, eval_stride=48, ttt_enabled=False).validate()
    with pytest.raises(tgpt.ConfigError) as info:
        tiny_h(tgpt, train_seq_len=32, eval_seq_len=64, eval_stride=48).validate()
    assert info.value.errors == ["EVAL_STRIDE=48 must be in [1, 32] (the eval window length, and TRAIN_SEQ_LEN: "
                                 "TTT's windows)"]
    with pytest.raises(tgpt.ConfigError, match="TTT_CHUNK_TOKENS=32 must be >= TRAIN_SEQ_LEN=64"):
        tiny_h(tgpt, train_seq_len=64, eval_seq_len=32, ttt_chunk_tokens=32).validate()


# ---- the record's command, end to end ----

def test_record_env_line_gives_the_record_model(tgpt, tiny_data_short_val, monkeypatch, tmp_path):
    """SPEC §1's env line, scaled, through the trainer's own run(): the same-seed initial weights are SPEC §4's,
    the EMA (not SWA, not the raw weights) is what gets saved, no SWA snapshot is taken, late QAT switches on
    and stays on through TTT training, and the dtype recipe gives SPEC §4's table for this model."""
    environ = dict(tiny_data_short_val["env"], **RECORD_ENV_LINE)
    environ.update(RECORD_LINE_SCALED)
    h = tgpt.Hyperparameters.from_env(environ)
    seen = {"built": [], "ttt_qat": [], "averages": []}
    build_model, train, train_on_chunk, apply_weight_average = (
        tgpt.build_model, tgpt.train, tgpt.train_on_chunk, tgpt.apply_weight_average)

    def observed_build_model(*args):
        model = build_model(*args)
        seen["built"].append({k: v.clone() for k, v in model.state_dict().items()})
        return model

    def observed_train(*args):
        averages = train(*args)
        seen["averages"].append(averages)
        return averages

    def observed_apply_weight_average(logger, model, averages):
        seen["trained"] = {k: v.clone() for k, v in model.state_dict().items()}
        return apply_weight_average(logger, model, averages)

    def observed_train_on_chunk(h, dist_info, model, *args):
        seen["ttt_qat"].append(qat_flags(tgpt, model))
        return train_on_chunk(h, dist_info, model, *args)

    for name, observer in (("build_model", observed_build_model), ("train", observed_train),
                           ("apply_weight_average", observed_apply_weight_average),
                           ("train_on_chunk", observed_train_on_chunk)):
        monkeypatch.setattr(tgpt, name, observer)
    monkeypatch.chdir(tmp_path)
    dist_info = tgpt.DistInfo(0, 1, CPU)
    logger = tgpt.Logger(dist_info, "logs", h.run_id)
    try:
        tgpt.run(h, dist_info, logger, environ, tgpt.StopSignal(), None)
    finally:
        logger.close()
    console = [line for line in (tmp_path / "logs" / "record_line.txt").read_text().splitlines()
               if not line.startswith("config:")]

    assert_spec_initial_state(h, seen["built"][0])  # the training model; later builds are the reloaded artifact
    averages, = seen["averages"]
    assert averages.swa_count == 0 and averages.swa_sum is None
    saved = torch.load(tmp_path / "logs" / "record_line" / tgpt.RAW_MODEL_FILENAME, weights_only=True)
    assert all(torch.equal(saved[k], averages.ema[k]) for k in saved)
    assert any(not torch.equal(saved[k], seen["trained"][k]) for k in saved)  # the EMA, not the trained weights
    assert "ema:applying EMA weights" in console and not any(line.startswith("swa:start") for line in console)
    assert sum(line.startswith("swa:ignored SWA_ENABLED=1 with EMA_ENABLED=1") for line in console) == 1
    assert any(line.startswith("WARNING unknown_env: LATE_QAT=1 is not a setting") for line in console)
    assert [line for line in console if line.startswith("late_qat:enabled")] == ["late_qat:enabled step:10 "
                                                                                  "scale:0.1000"]
    assert len(seen["ttt_qat"]) > 1 and set(seen["ttt_qat"]) == {(1.0, 1.0)}
    assert any(line.startswith("legal_ttt_exact") for line in console)
    with torch.device("meta"):
        model = tgpt.apply_dtype_recipe(tgpt.GPT(h), h)
    assert {name for name, p in model.named_parameters() if p.dtype == torch.bfloat16} == SPEC_BF16
