"""CPU tests of the end of a run (SPEC §6-§9): weight averages, int6/int8 artifact, byte accounting, safe loading,
sliding-window eval (every target scored once) and legal score-first TTT (nothing trained before it is scored).
The section is reached through the `ev` fixture: train_gpt.py loaded as a module."""
import dataclasses
import importlib.util
import math
import os
import pickle
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

REPO = Path(__file__).resolve().parents[1]
CPU = torch.device("cpu")


def load_eval_module():
    spec = importlib.util.spec_from_file_location("train_gpt", REPO / "train_gpt.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_gpt"] = module  # before exec: @dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def ev():
    return load_eval_module()


class ListLogger:
    def __init__(self):
        self.lines = []

    def log(self, msg, console=True):
        self.lines.append(msg)


TINY = dict(vocab_size=64, num_layers=4, model_dim=32, num_heads=4, num_kv_heads=2, mlp_mult=2.0, rope_dims=4,
            xsa_last_n=2, bigram_vocab_size=32, bigram_dim=8, ve_dim=8, ve_layers="2,3", train_seq_len=32,
            eval_seq_len=32, val_batch_size=8 * 32 * 4, eval_stride=8, eval_batch_seqs=4, ttt_chunk_tokens=128,
            ttt_batch_seqs=2, ttt_epochs=2, ttt_lr=0.05, torch_compile="0")


def tiny_h(ev, **overrides):
    return ev.Hyperparameters(**{**TINY, **overrides})


def dist_info(ev):
    return ev.DistInfo(rank=0, world_size=1, device=CPU)


def random_model(ev, h, seed=0):
    """The core's GPT with every parameter random (the real init zeroes W_o/W_down, which hides bugs)."""
    model = ev.build_model(h, CPU)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return model.eval()


def byte_tables(ev, vocab_size, seed=0):
    generator = torch.Generator().manual_seed(seed)
    boundary = torch.zeros(vocab_size, dtype=torch.bool)
    boundary[:2] = True
    base = torch.randint(1, 4, (vocab_size,), generator=generator).masked_fill(boundary, 0)
    space = (torch.rand(vocab_size, generator=generator) < 0.3) & ~boundary
    return ev.ByteTables(base.to(torch.int64), space, boundary)


def make_validation_data(ev, tokens, tables):
    """The core's ValidationData, each target's bytes counted from the tables as load_validation_data does."""
    ids = torch.from_numpy(tokens.astype(np.int64))
    return ev.ValidationData(tokens=tokens, target_bytes=ev.count_target_bytes(ids[:-1], ids[1:], tables).int())


def validation_data(ev, h, num_targets, seed=0):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, h.vocab_size, num_targets + 1).astype(np.uint16)
    return make_validation_data(ev, tokens, byte_tables(ev, h.vocab_size))


def scored_targets(starts, window_len, stride, num_targets):
    """SPEC rule, independently: window 0 scores [0, L), window ws > 0 scores [ws+L-stride, ws+L), both cut at N."""
    ranges = [(0 if ws == 0 else ws + window_len - stride, min(ws + window_len, num_targets)) for ws in starts]
    return [j for begin, end in ranges for j in range(begin, end)]


def reference_sliding(ev, h, model, data, stride):
    """Straightforward exact-once sliding eval: one unpadded window at a time, full logits, fp64 sums."""
    tokens = torch.from_numpy(data.tokens.astype(np.int64))
    num_targets, window_len = tokens.numel() - 1, h.effective_eval_seq_len
    nll_sum = target_count = byte_count = 0.0
    with torch.no_grad():
        for ws in ev.sliding_window_starts(num_targets, window_len, stride).tolist():
            end = min(ws + window_len, num_targets)
            x, y = tokens[ws:end][None], tokens[ws + 1:end + 1][None]
            first = 0 if ws == 0 else window_len - stride
            logits = model.logits_from_hidden(model.forward_hidden(x))
            nll = F.cross_entropy(logits[0, first:], y[0, first:], reduction="none")
            nll_sum += nll.double().sum().item()
            target_count += nll.numel()
            byte_count += data.target_bytes[ws + first:end].sum().item()
    return ev.bits_per_byte(nll_sum, target_count, byte_count)


class ScoreObserver:
    """Watches the scoring from outside the trainer (it carries no test hooks): wraps build_window_batch (each batch's
    targets and score mask), the model's logits_from_hidden under inference mode (the scoring forward's logits, from
    which the per-target nll is computed as score_windows does) and train_on_chunk (the chunk each TTT step trains on).
    events, in call order: ("score", targets, nll) per scored batch and ("train", chunk_begin, chunk_end)."""

    def __init__(self, ev, monkeypatch, model):
        self.events, self._batch = [], None
        build, train, logits_from_hidden = ev.build_window_batch, ev.train_on_chunk, model.logits_from_hidden

        def build_window_batch(tokens, window_starts, seq_len, stride):
            x, y, score_mask = build(tokens, window_starts, seq_len, stride)
            self._batch = (y, score_mask, window_starts[:, None] + torch.arange(seq_len))
            return x, y, score_mask

        def observed_logits_from_hidden(hidden):
            logits = logits_from_hidden(hidden)
            if torch.is_inference_mode_enabled():  # scoring, not a TTT training step
                width = logits.size(1)  # score_windows projects only the positions from the first scored one on
                y, mask, targets = (t[:, -width:] for t in self._batch)
                nll = F.cross_entropy(logits.float().flatten(0, 1), y.flatten(), reduction="none").view_as(y)
                self.events.append(("score", targets[mask].tolist(), nll[mask].tolist()))
            return logits

        def train_on_chunk(*args):
            self.events.append(("train",) + tuple(args[-2:]))
            return train(*args)

        monkeypatch.setattr(ev, "build_window_batch", build_window_batch)
        monkeypatch.setattr(ev, "train_on_chunk", train_on_chunk)
        monkeypatch.setattr(model, "logits_from_hidden", observed_logits_from_hidden)

    def scored(self):
        return [j for event in self.events if event[0] == "score" for j in event[1]]

    def nll_by_target(self):
        return {j: v for event in self.events if event[0] == "score" for j, v in zip(event[1], event[2])}


# ---- config ----

def test_field_defaults_validate_and_errors_name_the_variable(ev):
    ev.Hyperparameters().validate()
    tiny_h(ev).validate()
    bad = tiny_h(ev, eval_stride=33, eval_batch_seqs=0, ttt_chunk_tokens=16, ttt_freeze_blocks=5, ttt_lr=0.0,
                 ttt_momentum=1.0, ttt_grad_clip=0.0, ttt_epochs=0, control_tensor_name_patterns="a,,b")
    with pytest.raises(ev.ConfigError) as info:
        bad.validate()
    errors = "\n".join(info.value.errors)
    for name in ("EVAL_STRIDE=33", "EVAL_BATCH_SEQS=0", "TTT_CHUNK_TOKENS=16", "TTT_FREEZE_BLOCKS=5", "TTT_LR=0.0",
                 "TTT_MOMENTUM=1.0", "TTT_GRAD_CLIP=0.0", "TTT_EPOCHS=0", "CONTROL_TENSOR_NAME_PATTERNS='a,,b'"):
        assert name in errors
    assert len(info.value.errors) == 9
    with pytest.raises(ev.ConfigError, match="EVAL_STRIDE=0"):
        tiny_h(ev, eval_stride=0).validate()


# ---- windows ----

@pytest.mark.parametrize("num_targets,window_len,stride", [
    (1000, 64, 8), (1001, 64, 8), (64, 64, 8), (65, 64, 8), (40, 64, 8), (1000, 64, 64), (999, 64, 64),
    (777, 64, 1), (500, 48, 20), (1, 8, 4)])
def test_window_runs_tile_the_targets_once(ev, num_targets, window_len, stride):
    starts = ev.sliding_window_starts(num_targets, window_len, stride)
    assert starts.tolist() == sorted(set(starts.tolist()))
    assert sorted(scored_targets(starts.tolist(), window_len, stride, num_targets)) == list(range(num_targets))
    tokens = torch.arange(num_targets + 1, dtype=torch.int32) + 5  # x at target j is j + 5, y is j + 6
    x, y, mask = ev.build_window_batch(tokens, starts, window_len, stride)
    positions = starts[:, None] + torch.arange(window_len)
    assert sorted(positions[mask].tolist()) == list(range(num_targets))
    inside = positions < num_targets
    assert torch.equal(x, torch.where(inside, positions + 5, 0))
    assert torch.equal(y, torch.where(inside, positions + 6, 0))
    assert x.dtype == y.dtype == torch.int64


def test_padding_windows_score_nothing(ev):
    tokens = torch.arange(101, dtype=torch.int32)
    _, _, mask = ev.build_window_batch(tokens, torch.tensor([100, 100]), 16, 4)
    assert not mask.any()


def test_record_window_and_chunk_counts(ev):
    num_targets = 62_021_632
    starts = ev.sliding_window_starts(num_targets, 2048, 64)
    assert starts.numel() == 969_088 - 31  # the record's count less its 31 tail windows that re-scored 64 targets
    chunks = ev.assign_windows_to_chunks(starts, 2048, 64, num_targets, 32768)
    counts = [chunk.numel() for chunk in chunks]
    assert len(counts) == 1893 and counts[0] == 481 and set(counts[1:-1]) == {512} and counts[-1] == 384


def test_chunk_assignment_by_first_scored_target(ev):
    num_targets, window_len, stride, chunk = 1000, 64, 8, 96
    starts = ev.sliding_window_starts(num_targets, window_len, stride)
    chunks = ev.assign_windows_to_chunks(starts, window_len, stride, num_targets, chunk)
    assert len(chunks) == math.ceil(num_targets / chunk)
    assert torch.equal(torch.cat(chunks), starts)
    for index, members in enumerate(chunks):
        for ws in members.tolist():
            targets = scored_targets([ws], window_len, stride, num_targets)
            assert min(index, len(chunks) - 1) == min(targets[0] // chunk, len(chunks) - 1)
            assert all(t // chunk == index for t in targets)  # L, chunk multiples of the stride: no run crosses


# ---- sliding eval ----

@pytest.mark.parametrize("num_targets,stride,batch_seqs", [(32 * 9, 8, 4), (32 * 9, 8, 3), (32 * 7, 32, 5),
                                                           (32 * 6, 5, 1)])
def test_sliding_eval_scores_every_target_once_and_matches_reference(ev, monkeypatch, num_targets, stride,
                                                                   batch_seqs):
    h = tiny_h(ev, eval_batch_seqs=batch_seqs)
    model, data = random_model(ev, h), validation_data(ev, h, num_targets)
    observer = ScoreObserver(ev, monkeypatch, model)
    tokens = ev.device_tokens(data, CPU)
    loss, bpb = ev.sliding_window_eval(h, dist_info(ev), model, model.forward_hidden, tokens, data.target_bytes, stride)
    assert sorted(observer.scored()) == list(range(num_targets))
    ref_loss, ref_bpb = reference_sliding(ev, h, model, data, stride)
    assert loss == pytest.approx(ref_loss, rel=1e-6) and bpb == pytest.approx(ref_bpb, rel=1e-6)


def test_sliding_eval_with_stride_equal_window_is_the_plain_eval(ev):
    h = tiny_h(ev)
    model, data = random_model(ev, h), validation_data(ev, h, 32 * 10)
    tokens = ev.device_tokens(data, CPU)
    sliding = ev.sliding_window_eval(h, dist_info(ev), model, model.forward_hidden, tokens, data.target_bytes, 32)
    plain = ev.plain_eval(h, dist_info(ev), model, data)  # periodic: the training forward's batch mean
    assert sliding == pytest.approx(plain, rel=1e-6)
    long_h = tiny_h(ev, eval_seq_len=64)  # the plain eval keeps TRAIN_SEQ_LEN whatever the eval length
    scoring = ev.scoring_loss_sum(model, model.forward_hidden, h.eval_batch_seqs)  # the final evals'
    assert ev.plain_eval(long_h, dist_info(ev), model, data, scoring, h.eval_batch_seqs) == sliding


def test_sliding_eval_is_gradient_free_and_leaves_weights_unchanged(ev):
    h = tiny_h(ev)
    model, data = random_model(ev, h), validation_data(ev, h, 32 * 4)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    modes = []

    def hidden_forward(ids):
        modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled()))
        return model.forward_hidden(ids)

    ev.sliding_window_eval(h, dist_info(ev), model, hidden_forward, ev.device_tokens(data, CPU), data.target_bytes, 8)
    assert modes and all(mode == (True, False) for mode in modes)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert all(p.grad is None for p in model.parameters())


# ---- TTT ----

def run_ttt(ev, h, model, data, hidden_forward=None):
    logger = ListLogger()
    result = ev.ttt_eval(h, dist_info(ev), logger, model, hidden_forward or model.forward_hidden,
                         ev.device_tokens(data, CPU), data.target_bytes)
    return result, logger


def test_ttt_scores_each_chunk_before_training_on_it_and_never_trains_the_last(ev, monkeypatch):
    h = tiny_h(ev)
    num_targets = 32 * 19  # 5 chunks of 128 targets, the last one partial
    model, data = random_model(ev, h), validation_data(ev, h, num_targets)
    observer, modes = ScoreObserver(ev, monkeypatch, model), []

    def hidden_forward(ids):  # the scoring forward: no autograd, no training-mode layers
        modes.append((torch.is_inference_mode_enabled(), torch.is_grad_enabled(), model.training))
        return model.forward_hidden(ids)

    run_ttt(ev, h, model, data, hidden_forward)
    assert modes and set(modes) == {(True, False, False)}
    num_chunks = math.ceil(num_targets / h.ttt_chunk_tokens)
    assert sorted(observer.scored()) == list(range(num_targets))
    scored_so_far, trained_chunks, chunk_order = set(), set(), []
    for event in observer.events:
        if event[0] == "score":
            chunk = min(event[1][0] // h.ttt_chunk_tokens, num_chunks - 1)  # a batch holds one chunk's windows
            assert all(min(t // h.ttt_chunk_tokens, num_chunks - 1) == chunk for t in event[1])
            assert chunk not in trained_chunks  # a chunk's scoring is over before its training starts
            scored_so_far.update(event[1])
        else:
            _, begin, end = event
            chunk = begin // h.ttt_chunk_tokens
            assert begin == chunk * h.ttt_chunk_tokens and end == min(begin + h.ttt_chunk_tokens, num_targets)
            assert set(range(begin, end)) <= scored_so_far  # nothing is trained on before it was scored
            trained_chunks.add(chunk)
        chunk_order.append(chunk)
    assert trained_chunks == set(range(num_chunks - 1))  # the last chunk is never trained on
    assert chunk_order == sorted(chunk_order)


def test_train_on_chunk_trains_only_on_the_chunk_s_whole_sequences(ev):
    """With tokens[j] = j the targets of a training sequence are its y values minus 1: every TTT step trains on
    whole TTT_BATCH_SEQS-sized runs of the chunk's own sequences, TTT_EPOCHS passes, nothing past the chunk."""
    h = tiny_h(ev)  # window 32, 2 sequences per step, 2 epochs
    seen = []

    class RecordingModel(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(()))

        def forward(self, x, y):
            assert torch.equal(x + 1, y)
            seen.append((y - 1).tolist())
            return self.weight * y.float().mean()

    model = RecordingModel()
    trainable = list(model.parameters())
    trainable[0].grad = torch.zeros(())
    optimizer = torch.optim.SGD(trainable, lr=0.1)
    ev.train_on_chunk(h, dist_info(ev), model, optimizer, trainable, {}, torch.arange(1000, dtype=torch.int32),
                      128, 128 + 100)  # 100 targets: 3 whole sequences of 32, the last 4 targets in none
    sequences = [list(range(128 + 32 * i, 160 + 32 * i)) for i in range(3)]
    assert seen == [sequences[:2], sequences[2:]] * h.ttt_epochs
    assert model.weight.item() != 0.0  # the steps were taken


def test_ttt_scores_do_not_depend_on_later_tokens(ev, monkeypatch):
    """Causality of the whole procedure: perturbing tokens after chunk k leaves every score of chunks <= k
    bit-identical, although the weights adapt from chunk to chunk."""
    h = tiny_h(ev)
    num_targets, k = 32 * 16, 1
    model_state = random_model(ev, h).state_dict()
    data = validation_data(ev, h, num_targets)
    cut = (k + 1) * h.ttt_chunk_tokens  # tokens[cut] is the last token of chunk k's targets
    perturbed_tokens = data.tokens.copy()
    perturbed_tokens[cut + 1:] = (perturbed_tokens[cut + 1:] + 7) % h.vocab_size
    results = []
    for tokens in (data.tokens, perturbed_tokens):
        model = ev.build_model(h, CPU)
        model.load_state_dict(model_state)
        with monkeypatch.context() as patches:
            observer = ScoreObserver(ev, patches, model)
            run_ttt(ev, h, model, make_validation_data(ev, tokens, byte_tables(ev, h.vocab_size)))
        results.append(observer.nll_by_target())
    assert all(results[0][j] == results[1][j] for j in range(cut))
    assert any(results[0][j] != results[1][j] for j in range(cut, num_targets))
    plain_model = ev.build_model(h, CPU)
    plain_model.load_state_dict(model_state)
    observer = ScoreObserver(ev, monkeypatch, plain_model)
    ev.sliding_window_eval(h, dist_info(ev), plain_model.eval(), plain_model.forward_hidden,
                           ev.device_tokens(data, CPU), data.target_bytes, h.eval_stride)
    plain = observer.nll_by_target()
    chunk = h.ttt_chunk_tokens
    assert all(plain[j] == pytest.approx(results[0][j], abs=1e-5) for j in range(chunk))  # chunk 0: no TTT yet
    assert any(abs(plain[j] - results[0][j]) > 1e-4 for j in range(chunk, num_targets))  # later: adapted


def test_ttt_logs_and_restores_the_model(ev):
    h = tiny_h(ev)
    model, data = random_model(ev, h), validation_data(ev, h, 32 * 40)  # 10 chunks: logs chunk 1 and 10
    (loss, bpb), logger = run_ttt(ev, h, model, data)
    lines = logger.lines
    assert lines[0] == ("ttt_sliding:start chunks=10 chunk_tokens=128 total_windows=157 stride=8 ttt_lr=0.05 "
                        "ttt_epochs=2 freeze_blocks=0")
    total = sum(p.numel() for p in model.parameters())
    assert lines[1] == f"ttt_sliding:params unfrozen={total} frozen=0"
    assert re.fullmatch(r"  ttt_chunk \[1/10\] bpb=\d+\.\d{6} time=\d+\.\ds", lines[2])
    assert re.fullmatch(r"  ttt_chunk \[10/10\] bpb=\d+\.\d{6} time=\d+\.\ds", lines[3])
    assert lines[4] == f"ttt_sliding:done val_loss={loss:.6f} val_bpb={bpb:.6f} " + lines[4].split()[-1]
    assert re.fullmatch(r"elapsed=\d+\.\ds", lines[4].split()[-1]) and len(lines) == 5
    assert float(lines[3].split("bpb=")[1].split()[0]) == pytest.approx(bpb, abs=1e-6)  # one rank: running = final
    assert not model.training and all(p.requires_grad and p.grad is None for p in model.parameters())


def test_ttt_freeze_blocks_freezes_their_tensors_and_bank_rows(ev):
    h = tiny_h(ev, ttt_freeze_blocks=1)
    model, data = random_model(ev, h), validation_data(ev, h, 32 * 12)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _, logger = run_ttt(ev, h, model, data)
    after = model.state_dict()
    n = h.num_layers
    frozen_rows = {"qo_bank": [0, n], "kv_bank": [0, n], "mlp_up_bank": [0], "mlp_down_bank": [0]}
    frozen = 0
    for name, rows in frozen_rows.items():
        other = [r for r in range(after[name].shape[0]) if r not in rows]
        assert torch.equal(after[name][rows], before[name][rows])
        assert not torch.equal(after[name][other], before[name][other])
        frozen += len(rows) * after[name][0].numel()
    for name in after:
        if name.startswith("blocks.0."):
            assert torch.equal(after[name], before[name])
            frozen += after[name].numel()
        elif name.startswith("blocks.1."):
            assert not torch.equal(after[name], before[name])
    total = sum(p.numel() for p in model.parameters())
    assert logger.lines[1] == f"ttt_sliding:params unfrozen={total - frozen} frozen={frozen}"


# ---- banks and quantization ----

def test_unbank_and_rebank_are_inverse(ev):
    h = tiny_h(ev)
    state = random_model(ev, h).state_dict()
    flat = ev.unbank_state_dict(state)
    n = h.num_layers
    assert torch.equal(flat["blocks.2.attn.c_q.weight"], state["qo_bank"][2])
    assert torch.equal(flat["blocks.2.attn.proj.weight"], state["qo_bank"][n + 2])
    assert torch.equal(flat["blocks.3.attn.c_v.weight"], state["kv_bank"][n + 3])
    assert torch.equal(flat["blocks.1.mlp.proj.weight"], state["mlp_down_bank"][1])
    assert not any(name.endswith("_bank") for name in flat) and len(flat) == len(state) - 4 + 6 * n
    rebanked = ev.rebank_state_dict(flat, state)
    assert list(rebanked) == list(state) and all(torch.equal(rebanked[k], state[k]) for k in state)


def test_quantization_kinds_on_the_record_model(ev):
    h = ev.Hyperparameters()
    with torch.device("meta"):
        state = ev.GPT(h).state_dict()
    flat = ev.unbank_state_dict(state)
    kinds = {name: ev.quantization_plan(h, name, t)[0] for name, t in flat.items()}
    assert sum(kind == "int6" for kind in kinds.values()) == 66
    assert sorted(name for name, kind in kinds.items() if kind == "int8") == [
        "bigram.embed.weight", "tok_emb.weight", "ve_shared.embed.weight"]
    assert kinds["bigram.proj.weight"] == "passthrough"  # exactly 65,536 elements
    control = [name for name in flat if any(p in name for p in h.control_tensor_name_patterns.split(","))]
    # SPEC §7.4's fp32 rule for large control tensors cannot fire (the trainer has none): all of them are small.
    # 4 per block (attn_scale, mlp_scale, resid_mix, q_gain), skip_weights, smear.gate, ve_shared.scale, 2 VE scales
    assert len(control) == 4 * h.num_layers + 5
    assert all(flat[name].numel() <= ev.PASSTHROUGH_MAX_NUMEL for name in control)
    assert ev.quantization_plan(h, "step", torch.zeros(100000, dtype=torch.int64))[0] == "passthrough"
    assert [ev.tensor_category(n) for n in ("tok_emb.weight", "blocks.0.mlp.fc.weight", "blocks.0.attn.c_k.weight",
                                            "ve_shared.proj.weight", "smear.gate")] == [
        "embed", "mlp", "attn", "attn", "other"]


def heavy_tailed(rows, cols, seed):
    generator = torch.Generator().manual_seed(seed)
    weight = torch.randn(rows, cols, generator=generator) * 0.05
    spikes = torch.rand(rows, cols, generator=generator) < 0.002
    return torch.where(spikes, weight * 40, weight)


def test_int6_rows_error_within_clip_bounds(ev):
    weight = heavy_tailed(64, 700, seed=1)
    q, scale = ev.quantize_int6_rows(weight)
    assert q.dtype == torch.int8 and scale.dtype == torch.float16 and q.shape == weight.shape
    assert q.abs().max() <= 31 and scale.shape == (64,)
    sigma = scale.float()[:, None].expand_as(weight)
    error = (weight - q.float() * sigma).abs()
    inner = q.abs() < 31
    assert (error[inner] <= sigma[inner] / 2 + 1e-6).all()
    clipped = ~inner
    assert (weight[clipped].abs() >= 30.5 * sigma[clipped] - 1e-6).all()  # at the clip: the value is ±31σ
    assert torch.equal(torch.sign(q[clipped].float()), torch.sign(weight[clipped]))


def spec_int6_candidates(weight):
    """SPEC §7.5 written out independently with NumPy: (q, scale, mse) per clip quantile."""
    w = weight.double().numpy()
    out = []
    for pct in (0.9990, 0.9995, 0.9999, 0.99999, 1.0):
        clip = np.quantile(np.abs(w), pct, axis=1) if pct < 1 else np.abs(w).max(axis=1)
        scale = np.maximum(clip / 31, 1 / 31).astype(np.float16).astype(np.float32)
        q = np.clip(np.round(w.astype(np.float32) / scale[:, None]), -31, 31)
        out.append((q, scale, float(np.mean((w - q * scale[:, None]) ** 2))))
    return out


def test_gptq_lite_keeps_the_first_strictly_best_candidate(ev):
    torch.manual_seed(0)
    weights = [torch.randn(16, 4000) * 3, torch.distributions.Laplace(0.0, 3.0).sample((16, 4000)),
               torch.distributions.StudentT(2.0).sample((16, 4000)) * 3,
               torch.distributions.StudentT(1.0).sample((16, 4000)) * 3,
               torch.randn(16, 4000) * 1e-3]  # last: every scale is the 1/31 floor, all candidates tie
    chosen = []
    for weight in weights:
        candidates = spec_int6_candidates(weight)
        best = 0
        for index, (_, _, error) in enumerate(candidates):
            if error < candidates[best][2] * (1 - 1e-6):  # the inputs have clear winners (no fp32/fp64 near-ties)
                best = index
        q, scale = ev.quantize_int6_rows(weight)
        assert np.array_equal(q.numpy(), candidates[best][0].astype(np.int8))
        assert np.array_equal(scale.float().numpy(), candidates[best][1])
        chosen.append(best)
    assert len(set(chosen[:4])) >= 3 and chosen[4] == 0  # the search is exercised; ties keep the first


def test_int8_rows_clip_and_scale(ev):
    weight = heavy_tailed(8, 3000, seed=3) * 20
    q, scale = ev.quantize_int8_rows(weight)
    clip = torch.quantile(weight.abs(), 0.9999984, dim=1)
    sigma = (clip / 127).clamp_min(1 / 127)
    assert torch.equal(scale, sigma.to(torch.float16)) and q.abs().max() <= 127
    clipped = torch.maximum(torch.minimum(weight, clip[:, None]), -clip[:, None])
    assert ((clipped - q.float() * sigma[:, None]).abs() <= sigma[:, None] / 2 + 1e-6).all()


# ---- artifact ----

@pytest.fixture
def small_passthrough(ev, monkeypatch):
    """Quantize the tiny model's matrices (its tensors are all below the record's 65,536-element threshold)."""
    monkeypatch.setattr(ev, "PASSTHROUGH_MAX_NUMEL", 256)


def test_reloaded_artifact_gives_exactly_the_dequantized_logits(ev, tmp_path, small_passthrough):
    h = tiny_h(ev)
    model, logger = random_model(ev, h), ListLogger()
    ev.export_artifact(h, dist_info(ev), logger, model, 1234, str(tmp_path))
    reloaded = ev.load_artifact_model(str(tmp_path / ev.ARTIFACT_FILENAME), lambda: ev.build_model(h, CPU))
    template = ev.build_model(h, CPU).state_dict()
    tensors, meta = ev.quantize_state_dict(ev.unbank_state_dict(model.state_dict()))
    assert {"passthrough", "int6", "int8"} <= {m if isinstance(m, str) else m["type"] for m in meta.values()}
    flat = ev.dequantize_state_dict(tensors, meta, ev.unbank_state_dict(template))
    expected_model = ev.build_model(h, CPU)
    expected_model.load_state_dict(ev.rebank_state_dict(flat, template), strict=True)
    ids = torch.randint(0, h.vocab_size, (3, 32), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        reloaded_logits, expected_logits, trained_logits = (m.logits_from_hidden(m.forward_hidden(ids))
                                                            for m in (reloaded, expected_model, model))
        assert torch.equal(reloaded_logits, expected_logits)
        assert not torch.equal(reloaded_logits, trained_logits)  # it was quantized
    for name, value in reloaded.state_dict().items():
        assert value.dtype == template[name].dtype and value.shape == template[name].shape


@pytest.mark.parametrize("compressor", ["pergroup", "brotli", "lzma"])
def test_byte_accounting_equals_the_file_sizes(ev, tmp_path, compressor):
    h = tiny_h(ev, compressor=compressor)
    logger = ListLogger()
    output_dir = tmp_path / "logs" / "run"  # export creates the run's folder
    result = ev.export_artifact(h, dist_info(ev), logger, random_model(ev, h), 4321, str(output_dir))
    raw = os.path.getsize(output_dir / ev.RAW_MODEL_FILENAME)
    artifact = os.path.getsize(output_dir / ev.ARTIFACT_FILENAME)
    assert result == {"raw_model_bytes": raw, "code_bytes": 4321, "model_bytes": artifact,
                      "total_bytes": artifact + 4321}
    total = artifact + 4321
    assert logger.lines[1:] == [
        f"Serialized model: {raw} bytes", "Code size: 4321 bytes",
        f"Serialized model int6+{compressor}: {artifact} bytes",
        f"Total submission size int6+{compressor}: {total} bytes",
        f"submission_bytes code_bytes:4321 model_bytes:{artifact} total_bytes:{total} limit_bytes:16000000 "
        f"headroom_bytes:{16_000_000 - total}"]
    assert re.fullmatch(r"timing_quantize_ms:\d+", logger.lines[0])
    blob = (output_dir / ev.ARTIFACT_FILENAME).read_bytes()
    assert blob.startswith(b"\xfd7zXZ\x00") == (compressor == "lzma") and blob.startswith(b"PGRP02") == (
        compressor == "pergroup")


@pytest.mark.parametrize("compressor", ["brotli", "lzma"])
def test_both_compressors_reload_and_an_undecodable_artifact_is_named(ev, tmp_path, compressor, small_passthrough):
    """Each compressor's artifact reloads to the same tensors (the reader tells them apart by the xz magic); brotli
    saves bytes; bytes that neither compressor reads, or a damaged xz stream, are an error naming the file."""
    h = tiny_h(ev)
    tensors, meta = ev.quantize_state_dict(ev.unbank_state_dict(random_model(ev, h).state_dict()))
    blob = ev.serialize_artifact(tensors, meta, compressor)
    got_tensors, got_meta = ev.deserialize_artifact(blob)
    assert got_meta == meta and got_tensors.keys() == tensors.keys()
    assert all(torch.equal(got_tensors[name], tensors[name]) for name in tensors)
    path = tmp_path / "final_model.int6.ptz"
    path.write_bytes(blob[:len(blob) // 2])  # truncated: neither decompressor finishes it
    with pytest.raises(ev.DataError, match="^%s: " % re.escape(str(path))) as caught:
        ev.load_artifact_model(str(path), lambda: ev.build_model(h, CPU))
    assert ("an xz (lzma) stream that does not decompress" if compressor == "lzma" else
            "neither an xz (lzma) nor a brotli stream") in str(caught.value)
    if compressor == "brotli":
        assert len(blob) < len(ev.serialize_artifact(tensors, meta, "lzma"))


@pytest.mark.parametrize("strict", [False, True])
def test_over_the_limit_is_an_error_line_and_strict_raises(ev, tmp_path, strict):
    h = tiny_h(ev, artifact_limit_strict=strict)
    logger = ListLogger()
    model = random_model(ev, h)
    if strict:
        with pytest.raises(ev.ArtifactTooLargeError, match=r"over the 16000000-byte limit \(ARTIFACT_LIMIT_STRICT=1\)"):
            ev.export_artifact(h, dist_info(ev), logger, model, 16_000_000, str(tmp_path))
    else:
        ev.export_artifact(h, dist_info(ev), logger, model, 16_000_000, str(tmp_path))
    errors = [line for line in logger.lines if line.startswith("ERROR")]
    assert len(errors) == 1 and f"strict:{strict}" in errors[0] and "limit_bytes:16000000" in errors[0]
    assert ev.account_submission_bytes(h, ListLogger(), 1, 15_999_000, 1000)["total_bytes"] == 16_000_000


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.mkdir, (self.marker,))


def test_loading_never_unpickles_arbitrary_objects(ev, tmp_path):
    import io
    import lzma
    marker = str(tmp_path / "pwned")
    buffer = io.BytesIO()
    torch.save({"w": {"x": torch.zeros(2)}, "m": {"x": _Payload(marker)}}, buffer)
    for raw in (buffer.getvalue(), pickle.dumps({"w": {}, "m": _Payload(marker)})):
        with pytest.raises(ev.DataError, match="artifact: its torch.save part does not load \\(UnpicklingError"):
            ev.deserialize_artifact(lzma.compress(raw))  # a named error, and nothing was run
        assert not os.path.exists(marker)
    for payload in ({"w": {"x": 1}, "m": {}}, {"w": {}, "m": {"x": "passthrough"}}, {"w": {}, "m": {"x": "exec"}},
                    {"w": {}, "m": {}, "extra": 1}, [1, 2]):
        buffer = io.BytesIO()
        torch.save(payload, buffer)
        with pytest.raises(ValueError, match="artifact"):
            ev.deserialize_artifact(lzma.compress(buffer.getvalue()))


# ---- the whole pipeline ----

def test_run_final_evaluation_logs_the_challenge_lines(ev, tmp_path, small_passthrough):
    h = tiny_h(ev, train_seq_len=64, eval_seq_len=64, val_batch_size=8 * 64 * 2, eval_stride=16,
               ttt_chunk_tokens=256)
    model, data = random_model(ev, h), validation_data(ev, h, 64 * 12)
    averages = ev.WeightAverages(h, model)
    logger = ListLogger()
    results = ev.run_final_evaluation(h, dist_info(ev), logger, model, averages, data, 999,
                                      lambda: ev.build_model(h, CPU), output_dir=str(tmp_path))
    f4, f8, ms = r"\d+\.\d{4}", r"\d+\.\d{8}", r"\d+ms"
    expected = [
        r"ema:applying EMA weights", rf"DIAGNOSTIC post_ema val_loss:{f4} val_bpb:{f4} eval_time:{ms}",
        r"timing_quantize_ms:\d+", r"Serialized model: \d+ bytes", r"Code size: 999 bytes",
        r"Serialized model int6\+brotli: \d+ bytes", r"Total submission size int6\+brotli: \d+ bytes",
        r"submission_bytes code_bytes:999 model_bytes:\d+ total_bytes:\d+ limit_bytes:16000000 headroom_bytes:\d+",
        rf"final_int6_roundtrip val_loss:{f4} val_bpb:{f4} eval_time:{ms}",
        rf"final_int6_roundtrip_exact val_loss:{f8} val_bpb:{f8}",
        rf"final_int6_sliding_window val_loss:{f4} val_bpb:{f4} stride:16 eval_time:{ms}",
        rf"final_int6_sliding_window_exact val_loss:{f8} val_bpb:{f8}",
        rf"final_int6_sliding_window_s64 val_loss:{f4} val_bpb:{f4} stride:64 eval_time:{ms}",
        rf"final_int6_sliding_window_s64_exact val_loss:{f8} val_bpb:{f8}",
        r"ttt_sliding:start chunks=3 chunk_tokens=256 total_windows=45 stride=16 ttt_lr=0\.05 ttt_epochs=2 "
        r"freeze_blocks=0",
        r"ttt_sliding:params unfrozen=\d+ frozen=0", r"  ttt_chunk \[1/3\] bpb=\d+\.\d{6} time=\d+\.\ds",
        r"  ttt_chunk \[3/3\] bpb=\d+\.\d{6} time=\d+\.\ds",
        r"ttt_sliding:done val_loss=\d+\.\d{6} val_bpb=\d+\.\d{6} elapsed=\d+\.\ds",
        rf"legal_ttt val_loss:{f4} val_bpb:{f4} eval_time:{ms}", rf"legal_ttt_exact val_loss:{f8} val_bpb:{f8}",
        rf"eval_time:{ms} \(deserialization, every eval above, compile included\)",  # from the start of evaluation
        rf"eval_time_split deserialize:{ms} final_int6_roundtrip:{ms} final_int6_sliding_window:{ms} "
        rf"final_int6_sliding_window_s64:{ms} legal_ttt:{ms} other:-?{ms}"]  # its parts, in the order they ran
    assert len(logger.lines) == len(expected), logger.lines
    for line, pattern in zip(logger.lines, expected):
        assert re.fullmatch(pattern, line), (line, pattern)
    parts = [int(part) for part in re.findall(r":(-?\d+)ms", logger.lines[-1])]
    assert abs(sum(parts) - int(re.search(r"\d+", logger.lines[-2]).group())) <= len(parts)  # they add up
    assert not any("int8" in line for line in logger.lines)
    assert results["final_int6_sliding_window_s64"] == pytest.approx(results["roundtrip"], rel=1e-6)  # stride = L
    assert results["total_bytes"] == os.path.getsize(tmp_path / ev.ARTIFACT_FILENAME) + 999
    assert set(results) >= {"average", "post_average", "roundtrip", "final_int6_sliding_window", "legal_ttt"}


def test_compiled_scoring_does_not_recompile_and_sees_ttt_updates(ev, monkeypatch):
    """The compiled forward is built once per model; TTT changes the weights in place between scoring calls.
    Dynamo's eager backend checks the guards and graph capture (the code under test) without C++ codegen."""
    import torch._dynamo

    compile_calls = []
    real_compile = torch.compile

    def compile_with_eager_backend(fn, **kwargs):
        compile_calls.append(kwargs)
        return real_compile(fn, backend="eager", **kwargs)

    monkeypatch.setattr(torch, "compile", compile_with_eager_backend)
    torch._dynamo.reset()
    h = tiny_h(ev, torch_compile="1")
    model, data = random_model(ev, h), validation_data(ev, h, 32 * 12)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    hidden_forward = ev.make_hidden_forward(h, dist_info(ev), model)
    tokens = ev.device_tokens(data, CPU)
    with torch._dynamo.config.patch(error_on_recompile=True):
        ev.sliding_window_eval(h, dist_info(ev), model, hidden_forward, tokens, data.target_bytes, 8)
        compiled = ev.ttt_eval(h, dist_info(ev), ListLogger(), model, hidden_forward, tokens, data.target_bytes)
    model.load_state_dict(state)
    eager = ev.ttt_eval(h, dist_info(ev), ListLogger(), model, model.forward_hidden, tokens, data.target_bytes)
    assert compile_calls == [{"dynamic": False, "fullgraph": True}]
    assert compiled == pytest.approx(eager, rel=1e-5)


# ---- two gloo ranks ----

RANK_WORKER = """
import json, os, sys
import torch
sys.path.insert(0, sys.argv[1])
import test_eval as t
ev = t.load_eval_module()
dist_info = ev.init_distributed(os.environ)
h = t.tiny_h(ev, **json.loads(sys.argv[2]))
model, data = t.random_model(ev, h), t.validation_data(ev, h, int(sys.argv[3]))
results = ev.run_final_evaluation(h, dist_info, t.ListLogger(), model, ev.WeightAverages(h, model), data, 100,
                                  lambda: ev.build_model(h, torch.device("cpu")), output_dir=sys.argv[4])
with open(os.path.join(sys.argv[4], "result_%d.json" % dist_info.rank), "w") as handle:  # not stdout: ranks interleave
    json.dump(results, handle)
torch.distributed.barrier()  # as train_gpt.main: no rank tears down while a peer still talks to it
torch.distributed.destroy_process_group()
# torch 2.13 CPU: after TTT's backward passes, interpreter teardown aborts now and then ("terminate called without
# an active exception", ~1 run in 12, results already written); skip the teardown so the test checks results only.
os._exit(0)
"""


def run_two_ranks(tmp_path, overrides, num_targets):
    """Both ranks under torchrun (its agent hosts the rendezvous store, as in real runs)."""
    import json
    import subprocess
    worker = tmp_path / "rank_worker.py"
    worker.write_text(RANK_WORKER)
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(worker),
         str(REPO / "tests"), json.dumps(overrides), str(num_targets), str(tmp_path)],
        env=dict(os.environ, OMP_NUM_THREADS="1"), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    return [json.loads((tmp_path / ("result_%d.json" % rank)).read_text()) for rank in (0, 1)]


def test_two_ranks_give_the_one_rank_results(ev, tmp_path):
    """Sliding windows and TTT sequences split over 2 gloo ranks with AVG-reduced TTT grads: with one TTT step
    per epoch on both layouts the whole pipeline matches one rank, and both ranks agree."""
    overrides = dict(ttt_batch_seqs=4)  # 4 sequences per chunk: one step per epoch for 1 rank and for 2 ranks
    num_targets = 32 * 14
    (tmp_path / "two").mkdir()
    rank0, rank1 = run_two_ranks(tmp_path / "two", overrides, num_targets)
    h = tiny_h(ev, **overrides)
    model, data = random_model(ev, h), validation_data(ev, h, num_targets)
    one = ev.run_final_evaluation(h, dist_info(ev), ListLogger(), model, ev.WeightAverages(h, model), data, 100,
                                  lambda: ev.build_model(h, CPU), output_dir=str(tmp_path))
    assert rank0 == rank1
    for key in ("post_average", "roundtrip", "final_int6_sliding_window", "legal_ttt"):
        assert rank0[key] == pytest.approx(list(one[key]), rel=1e-5), key
    assert rank0["total_bytes"] == one["total_bytes"]


def test_two_ranks_with_idle_ranks_in_ttt_do_not_hang(tmp_path):
    """One sequence per chunk: rank 1 has nothing to train on but still joins every gradient all-reduce."""
    rank0, rank1 = run_two_ranks(tmp_path, dict(ttt_chunk_tokens=32, ttt_batch_seqs=1), 32 * 5 + 7)
    assert rank0 == rank1 and math.isfinite(rank0["legal_ttt"][1])
