"""TRAIN_LOADER=documents (SPEC_0427 §3) and document-aware attention (§5): cu_seqlens against hand-computed values,
the loader's walk over shards and ranks against an independent reference (prefetch on and off), its start-up errors,
every attention path available here against a per-document softmax written out, and a packed row of the 04-27 model
equal to its documents run alone."""
import itertools
import math
import time
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tgpt_util import TINY_0427_ENV, tgpt  # noqa: F401 (fixture)

CPU = torch.device("cpu")
BOS = 1


def cu_by_hand(tokens, max_len, bucket):
    """SPEC_0427 §3 in plain Python: starts of documents (BOS, and 0), pieces from each start, + [T], padded."""
    starts = sorted({0} | {i for i, t in enumerate(tokens) if t == BOS})
    pieces = []
    for start, end in zip(starts, starts[1:] + [len(tokens)]):
        pieces += list(range(start, end, max_len))
    cu = pieces + [len(tokens)]
    return cu + [len(tokens)] * (-len(cu) % bucket)


@pytest.mark.parametrize("tokens, max_len, bucket, want", [
    ([1, 5, 5, 5, 5, 5, 5, 1, 3, 3, 1, 2], 4, 8, [0, 4, 7, 10, 12, 12, 12, 12]),  # doc of 7 cut at 4
    ([5, 5, 5, 5, 5, 5, 1, 3, 3, 1, 2], 4, 8, [0, 4, 6, 9, 11, 11, 11, 11]),  # no BOS at 0: 0 prepended
    ([5] * 9, 4, 4, [0, 4, 8, 9]),  # no BOS at all, exactly a bucket: no padding
    ([1, 2, 1, 2], 4, 2, [0, 2, 4, 4]),
])
def test_cu_seqlens_are_spec_pieces_padded_to_the_bucket(tgpt, tokens, max_len, bucket, want):
    got = tgpt.document_cu_seqlens(np.array(tokens, dtype=np.uint16), BOS, max_len, bucket)
    assert got.dtype == np.int32 and got.tolist() == want == cu_by_hand(tokens, max_len, bucket)


def test_cu_seqlens_on_random_rows_match_the_plain_form(tgpt):
    rng = np.random.default_rng(0)
    for _ in range(50):
        tokens = rng.integers(1, 4, size=int(rng.integers(1, 700)))  # ~1/3 BOS, plus long runs below
        tokens[rng.integers(0, len(tokens)):] = np.where(rng.random() < 0.5, 2, tokens[-1])
        got = tgpt.document_cu_seqlens(tokens, BOS, 16, 64)
        assert got.tolist() == cu_by_hand(tokens.tolist(), 16, 64) and len(got) % 64 == 0


# ---- the loader ----

SEQ_LEN, BATCH_TOKENS = 8, 128  # T = 128 / 8 = 16 tokens per rank and micro-step, span 17


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    path.write_bytes(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def document_shards(directory, seed=0):
    """Two shards of distinct tokens >= 2 with BOS at random places; shard 0 starts mid-document (3 tokens)."""
    rng, values = np.random.default_rng(seed), itertools.count(2)
    paths = []
    for index, size in enumerate((103, 80)):
        tokens = np.array([next(values) % 60000 + 2 for _ in range(size)])
        tokens[rng.random(size) < 0.15] = BOS
        tokens[:3 if index == 0 else 0] = 7
        tokens[3 if index == 0 else 0] = BOS
        paths.append(directory / f"fineweb_train_{index:06d}.bin")
        write_shard(paths[-1], tokens)
    return paths


def reference_micro_steps(paths, world_size, rank, count):
    """SPEC_0427 §3 read directly: the same shard for every rank, cursor at its first BOS, world spans of T + 1,
    rank r's the r-th; a shard without room for the next micro-step is left, the list wraps."""
    shards = [np.fromfile(path, dtype="<u2", offset=1024).astype(np.int64) for path in paths]
    local = BATCH_TOKENS // 8
    span, total = local + 1, world_size * (local + 1)
    index, cursor, out = 0, int(np.flatnonzero(shards[0] == BOS)[0]), []
    for _ in range(count):
        if cursor + total > len(shards[index]):
            index = (index + 1) % len(shards)
            cursor = int(np.flatnonzero(shards[index] == BOS)[0])
        mine = shards[index][cursor + rank * span:cursor + (rank + 1) * span]
        cursor += total
        out.append((mine[:-1], mine[1:], cu_by_hand(mine[:-1].tolist(), SEQ_LEN, 64)))
    return out


def make_h(directory, **overrides):
    return SimpleNamespace(**dict(dict(train_files=str(directory / "fineweb_train_*.bin"), train_prefetch=True,
                                       train_batch_tokens=BATCH_TOKENS, train_seq_len=SEQ_LEN, train_prefetch_queue=2,
                                       train_copy_stream=True, train_loader="documents"), **overrides))


class Logger:
    def __init__(self):
        self.lines = []

    def log(self, line):
        self.lines.append(line)


@pytest.mark.parametrize("world_size", [1, 2])
def test_loader_walks_shards_and_ranks_as_spec_0427_section_3(tgpt, tmp_path, world_size):
    """Both ranks, prefetch on and off (bit-identical), 14 micro-steps: shard 0 from its first BOS (position 3), the
    switch with the tail dropped, shard 1, and the wrap back to shard 0."""
    paths = document_shards(tmp_path)
    for rank in range(world_size):
        want = reference_micro_steps(paths, world_size, rank, 14)
        starts = [w[0][0] for w in want]
        assert len({int(s) for s in starts}) > 1
        batches = {}
        for prefetch in (True, False):
            dist_info = tgpt.DistInfo(rank, world_size, CPU)
            logger = Logger()
            with tgpt.make_train_loader(make_h(tmp_path, train_prefetch=prefetch), dist_info, logger) as loader:
                batches[prefetch] = [tuple(t.clone() for t in loader.next_batch()) for _ in range(14)]
            assert logger.lines[0].startswith("train_data loader:documents shards:2 row_tokens:16 max_piece:8")
        for (x, y, cu), (x_sync, y_sync, cu_sync), (x_ref, y_ref, cu_ref) in zip(batches[True], batches[False], want):
            assert x.shape == y.shape == (1, 16) and x.dtype == y.dtype == torch.int64 and cu.dtype == torch.int32
            assert x[0].tolist() == x_ref.tolist() and y[0].tolist() == y_ref.tolist() and cu.tolist() == cu_ref
            assert torch.equal(x, x_sync) and torch.equal(y, y_sync) and torch.equal(cu, cu_sync)
    wraps = [w[0][0] for w in reference_micro_steps(paths, world_size, 0, 14)]
    assert wraps.count(wraps[0]) >= 2  # the list wrapped within the 14 micro-steps


def test_loader_reads_are_stamped_with_the_training_clock(tgpt, tmp_path):
    document_shards(tmp_path)
    clock = tgpt.TrainingClock()
    with tgpt.make_train_loader(make_h(tmp_path, train_prefetch=False), tgpt.DistInfo(0, 1, CPU), Logger(),
                                clock) as loader:
        loader.next_batch()
        assert clock.last_read_ms == 0.0  # before the clock starts: the compile warm-up's reads
        clock.run(True)
        loader.next_batch()
        read_ms = clock.last_read_ms
        assert 0.0 < read_ms <= clock.run(False)
        time.sleep(0.01)
        loader.next_batch()  # while paused (an evaluation): the paused time
        assert clock.last_read_ms == clock.now_ms() >= read_ms


@pytest.mark.parametrize("tokens, message", [
    ([5] * 60, "no BOS (id 1) in its 60 tokens: TRAIN_LOADER=documents"),
    ([5] * 30 + [1] + [5] * 29, "30 tokens from its first BOS, fewer than the WORLD_SIZE*(TRAIN_BATCH_TOKENS/8+1)=34"),
])
def test_a_shard_without_bos_or_too_short_is_a_named_error_at_start_up(tgpt, tmp_path, tokens, message):
    document_shards(tmp_path)
    write_shard(tmp_path / "fineweb_train_000005.bin", tokens)  # the last shard: read only after a wrap
    with pytest.raises(tgpt.DataError) as info:
        tgpt.make_train_loader(make_h(tmp_path), tgpt.DistInfo(0, 2, CPU), Logger())
    assert str(info.value).startswith(str(tmp_path / "fineweb_train_000005.bin")) and message in str(info.value)


# ---- attention ----

def per_document_softmax(q, k, v, cu):
    """Written out in fp64: token t of segment [a, b) attends to a..t with softmax(q k / sqrt(D)); KV head h // g."""
    group = q.size(2) // k.size(2)
    k, v = k.double().repeat_interleave(group, 2), v.double().repeat_interleave(group, 2)
    out = torch.zeros_like(q, dtype=torch.float64)
    for a, b in zip(cu[:-1].tolist(), cu[1:].tolist()):
        scores = torch.einsum("thd,shd->hts", q[0, a:b].double(), k[0, a:b]) / math.sqrt(q.size(-1))
        scores = scores.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), float("-inf"))
        out[0, a:b] = torch.einsum("hts,shd->thd", scores.softmax(-1), v[0, a:b])
    return out


def random_packed_row(tgpt, seed, length=200, max_len=32):
    rng = np.random.default_rng(seed)
    tokens = rng.integers(2, 9, size=length)
    tokens[rng.choice(length, size=4, replace=False)] = BOS
    tokens[150:] = 5  # one long last document: pieces cut at max_len
    return torch.from_numpy(tgpt.document_cu_seqlens(tokens, BOS, max_len, 64))


@pytest.mark.parametrize("backend", ["sdpa", "flex", "torch_varlen", "fa3_varlen"])
def test_each_attention_path_equals_the_per_document_softmax(tgpt, backend):
    """Forward and q/k/v gradients, GQA 4/2, pieces cut at 32 tokens and empty trailing segments."""
    for seed in range(3):
        cu = random_packed_row(tgpt, seed)
        assert cu[-1] == 200 and cu[-2] == 200 and len(cu) == 64 and (cu.diff() <= 32).all()
        generator = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(1, 200, heads, 16, generator=generator, requires_grad=True) for heads in (4, 2, 2))
        want = per_document_softmax(q, k, v, cu)
        try:
            out = tgpt.document_attention(q, k, v, cu, 32, backend)
        except Exception as exc:  # fa3_varlen / torch_varlen need CUDA kernels; the start-up probe reports this
            if "backward on CPU" not in str(exc):
                pytest.skip(f"{backend} does not run on this CPU build: {str(exc)[:80]}")
            with torch.no_grad():  # FlexAttention on the CPU: forward only (eager has no backward there)
                out = tgpt.document_attention(q.detach(), k.detach(), v.detach(), cu, 32, backend)
                assert (out.double() - want).abs().max() < 1e-5
            continue
        grad = torch.randn(out.shape, generator=generator)
        got_grads = torch.autograd.grad(out, (q, k, v), grad)
        want_grads = torch.autograd.grad(want, (q, k, v), grad.double())
        assert (out.double() - want).abs().max() < 1e-5
        assert all((g.double() - w).abs().max() < 1e-5 for g, w in zip(got_grads, want_grads))
        reference = tgpt.per_document_attention(q, k, v, cu)  # the start-up probe's reference
        assert (reference.double() - want).abs().max() < 1e-5


class StandInFA4:
    """flash_attn.cute.interface's two entry points as flash-attn-4 4.0.0b36 defines them, computed with the fp64
    per-document softmax: _flash_attn_fwd(q, k, v, cu_seqlens_q=, cu_seqlens_k=, max_seqlen_q=, max_seqlen_k=,
    causal=, return_lse=) -> (out (T, H, D), lse (H, T), ...) and _flash_attn_bwd(q, k, v, out, dout, lse, <the same
    spans>) -> (dq, dk, dv, ...), KV head h // (H / Hkv). Each call's max_seqlen is kept."""

    def __init__(self):
        self.calls = []

    def spans(self, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal):
        assert causal is True and cu_seqlens_q is cu_seqlens_k and max_seqlen_q == max_seqlen_k
        self.calls.append(max_seqlen_q)
        return cu_seqlens_q

    def _flash_attn_fwd(self, q, k, v, return_lse=False, **spans):
        assert return_lse and q.dim() == 3  # varlen: (total tokens, heads, head dim), no batch dimension
        out = per_document_softmax(q[None], k[None], v[None], self.spans(**spans))[0].to(q.dtype)
        return out, torch.zeros(q.size(1), q.size(0)), None, None, None

    def _flash_attn_bwd(self, q, k, v, out, dout, lse, **spans):
        """Attention's backward written out (a torch op's body runs below autograd): per segment P = softmax(S),
        dV = P^T dO, dS = P (dO V^T - rowsum(dO O)), dQ = dS K / sqrt(D), dK = dS^T Q / sqrt(D); KV grads summed
        over the query heads that read them."""
        assert lse.shape == (q.size(1), q.size(0)) and out.shape == dout.shape == q.shape
        group, scale = q.size(1) // k.size(1), 1.0 / math.sqrt(q.size(-1))
        q, o, do = q.double(), out.double(), dout.double()
        k, v = k.double().repeat_interleave(group, 1), v.double().repeat_interleave(group, 1)
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        cu = self.spans(**spans).tolist()
        for a, b in zip(cu[:-1], cu[1:]):
            scores = torch.einsum("thd,shd->hts", q[a:b], k[a:b]) * scale
            p = scores.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
            dv[a:b] = torch.einsum("hts,thd->shd", p, do[a:b])
            ds = p * (torch.einsum("thd,shd->hts", do[a:b], v[a:b]) - (do[a:b] * o[a:b]).sum(-1).T[:, :, None])
            dq[a:b] = torch.einsum("hts,shd->thd", ds, k[a:b]) * scale
            dk[a:b] = torch.einsum("hts,thd->shd", ds, q[a:b]) * scale
        fold = lambda g: g.view(g.size(0), -1, group, g.size(-1)).sum(2)  # noqa: E731
        return dq.to(dout.dtype), fold(dk).to(dout.dtype), fold(dv).to(dout.dtype)


def test_fa4_varlen_is_one_differentiable_op_also_in_a_compiled_graph(tgpt, monkeypatch):
    """DOC_ATTN_BACKEND=fa4_varlen: FA4's forward and backward wrapped as one torch op with a fake (shape) form, so
    that a fullgraph compile keeps it whole; out and q/k/v gradients equal the per-document softmax, eager and
    compiled, GQA 4/2, pieces <= 32 tokens, empty trailing segments; the start-up probe accepts it."""
    stand_in = StandInFA4()
    monkeypatch.setattr(tgpt, "_fa4", stand_in)
    compiled = torch.compile(tgpt.document_attention, backend="aot_eager", fullgraph=True)
    for seed, attention in ((0, tgpt.document_attention), (1, compiled)):
        cu = random_packed_row(tgpt, seed)
        generator = torch.Generator().manual_seed(seed)
        q, k, v = (torch.randn(1, 200, heads, 16, generator=generator, requires_grad=True) for heads in (4, 2, 2))
        out = attention(q, k, v, cu, 32, "fa4_varlen")
        want = per_document_softmax(q, k, v, cu)
        grad = torch.randn(out.shape, generator=generator)
        got_grads = torch.autograd.grad(out, (q, k, v), grad)
        want_grads = torch.autograd.grad(want, (q, k, v), grad.double())
        assert out.shape == q.shape and (out.double() - want).abs().max() < 1e-5
        assert all((g.double() - w).abs().max() < 1e-5 for g, w in zip(got_grads, want_grads))
    assert stand_in.calls == [32] * 4  # one forward and one backward per pass, nothing traced into them
    h = tgpt.Hyperparameters.from_env(dict(TINY_0427_ENV, DOC_ATTN_BACKEND="fa4_varlen"))
    assert tgpt.select_doc_attention_backend(h, tgpt.DistInfo(0, 1, CPU)) == ("fa4_varlen",
                                                                              "forced by DOC_ATTN_BACKEND")
    monkeypatch.setattr(tgpt, "_fa4", None)  # flash-attn-4 not installed: forced, a clear start-up error
    with pytest.raises(tgpt.ConfigError, match=r"DOC_ATTN_BACKEND=fa4_varlen cannot run here: flash_attn\.cute"
                                               r"\.interface \(flash-attn-4\) not importable"):
        tgpt.select_doc_attention_backend(h, tgpt.DistInfo(0, 1, CPU))


def test_the_backend_choice_is_probed_and_checked(tgpt):
    h = tgpt.Hyperparameters.from_env(dict(TINY_0427_ENV))
    assert h.train_loader == "documents" and h.gptq_calibration_loader == "shuffled"
    choice, reason = tgpt.select_doc_attention_backend(h, tgpt.DistInfo(0, 1, CPU))
    assert choice in ("flex", "sdpa") and reason.startswith("auto")
    if choice == "sdpa":
        assert "flex unavailable" in reason
    assert all("%s unavailable" % name in reason for name in ("fa3_varlen", "fa4_varlen", "torch_varlen"))
    h = tgpt.Hyperparameters.from_env(dict(TINY_0427_ENV, DOC_ATTN_BACKEND="sdpa"))
    assert tgpt.select_doc_attention_backend(h, tgpt.DistInfo(0, 1, CPU)) == ("sdpa", "forced by DOC_ATTN_BACKEND")
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27", "DOC_ATTN_BACKEND": "sdpa"})
    with pytest.raises(tgpt.ConfigError, match="DOC_ATTN_BACKEND=sdpa cannot run here: a \\(T, T\\) mask of T=98304"):
        tgpt.select_doc_attention_backend(h, tgpt.DistInfo(0, 1, CPU))
    assert tgpt.select_doc_attention_backend(tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"}), None)[0] == "none"
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "DOC_ATTN_BACKEND": "flex"})
    assert info.value.errors == ["DOC_ATTN_BACKEND=flex applies to TRAIN_LOADER=documents or TTT_MODE=lora_phased "
                                 "only"]
    # the phased TTT's global SGD trains packed rows whatever the loader was: a backend is chosen for it too
    shuffled = dict(TINY_0427_ENV, TRAIN_LOADER="shuffled")
    h = tgpt.Hyperparameters.from_env(dict(shuffled, DOC_ATTN_BACKEND="sdpa"))
    assert tgpt.select_doc_attention_backend(h, tgpt.DistInfo(0, 1, CPU)) == ("sdpa", "forced by DOC_ATTN_BACKEND")
    h = tgpt.Hyperparameters.from_env(dict(shuffled, TTT_ENABLED="0"))
    assert tgpt.select_doc_attention_backend(h, None)[0] == "none"
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "TRAIN_LOADER": "documents"})
    assert info.value.errors[0].startswith("TRAIN_LOADER=documents and TTT_MODE=lora_phased need ROPE_NTK=0")


def test_a_packed_row_of_the_04_27_model_equals_its_documents_alone(tgpt):
    """The tiny 04-27 model (SmearGate with the BOS mask, two lanes, XSA, sparse gate) on one packed row with
    cu_seqlens gives each document's hidden states as if it ran alone (RoPE is relative; SmearGate stops at BOS);
    without cu_seqlens the documents mix."""
    h = tgpt.Hyperparameters.from_env(dict(TINY_0427_ENV))
    model = tgpt.build_model(h, CPU)
    tgpt.use_kernels(model, "sdpa_cpu", doc_attention="sdpa")
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for param in (model.qo_bank, model.mlp_down_bank, model.smear_gate.weight, model.smear_lambda):
            param.normal_(0.0, 0.3, generator=generator)
    lengths = [20, 64, 1, 43]  # each <= TRAIN_SEQ_LEN=64: one piece per document
    docs = [torch.cat((torch.tensor([BOS]), torch.randint(2, 1024, (n - 1,), generator=generator))) for n in lengths]
    row = torch.cat(docs)[None]
    cu = torch.from_numpy(tgpt.document_cu_seqlens(row[0].numpy(), BOS, h.train_seq_len, 64))
    assert cu[:5].tolist() == [0, 20, 84, 85, 128]
    with torch.no_grad():
        packed = model.forward_hidden(row, None, cu)
        alone = torch.cat([model.forward_hidden(doc[None]) for doc in docs], dim=1)
        dense = model.forward_hidden(row)
    assert (packed - alone).abs().max() < 1e-4 * alone.abs().max()
    assert (dense - alone)[:, 20:].abs().max() > 1e-2 * alone.abs().max()
    targets = torch.randint(0, 1024, row.shape, generator=generator)
    want = torch.nn.functional.cross_entropy(model.logits_from_hidden(alone)[0], targets[0])
    assert model(row, targets, cu).item() == pytest.approx(want.item(), rel=1e-5)  # the training call threads it


def test_gptq_calibration_on_packed_rows_passes_their_cu_seqlens(tgpt):
    """GPTQ_CALIBRATION_LOADER=train with TRAIN_LOADER=documents: the Hessians are those of the document-aware
    forward (the attention output's Hessian differs from the dense forward's)."""
    h = tgpt.Hyperparameters.from_env(dict(TINY_0427_ENV, GPTQ_CALIBRATION_BATCHES="2",
                                           GPTQ_CALIBRATION_LOADER="train"))
    model = tgpt.build_model(h, CPU)
    tgpt.use_kernels(model, "sdpa_cpu", doc_attention="sdpa")
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        model.qo_bank.normal_(0.0, 0.3, generator=generator)
    rows = []
    for _ in range(3):
        ids = torch.randint(2, 1024, (1, 256), generator=generator)
        ids[0, ::50] = BOS
        rows.append((ids, ids, torch.from_numpy(tgpt.document_cu_seqlens(ids[0].numpy(), BOS, 64, 64))))

    class Rows:
        clock = tgpt.TrainingClock()

        def next_batch(self):
            return rows.pop(0)

        def close(self):
            pass
    batches = list(rows)
    hessians = tgpt.collect_hessians(h, Logger(), model, Rows)
    packed, dense = tgpt.HessianCollector(), tgpt.HessianCollector()
    with torch.no_grad():
        for ids, _, cu in batches[:2]:
            packed.add(tgpt.rms_norm(model.forward_hidden(ids, packed, cu)), "tok_emb.weight")
            dense.add(tgpt.rms_norm(model.forward_hidden(ids, dense)), "tok_emb.weight")
    name = "blocks.3.attn.proj.weight"
    assert torch.allclose(hessians[name], packed[name] / 2)
    assert not torch.allclose(hessians[name], dense[name] / 2, rtol=1e-3)


def test_plain_eval_of_a_documents_model_scores_each_target_in_its_own_document(tgpt):
    """SPEC_0427 §5's diagnostic eval, every target: a batch of sequences is one packed row whose segments are the
    documents (cut every TRAIN_SEQ_LEN tokens from a document's start, and at the batch's start), so each target's
    context is its own document's earlier tokens in the batch. Reference: each segment run alone. Both the training
    forward's form (periodic evals) and the final evals' padded form give it; a dense eval does not."""
    h = tgpt.Hyperparameters.from_env(dict(TINY_0427_ENV, VAL_BATCH_SIZE=str(8 * 64 * 3)))
    model = tgpt.build_model(h, CPU)
    tgpt.use_kernels(model, "sdpa_cpu", doc_attention="sdpa")
    generator = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, param in model.named_parameters():  # every weight random: documents matter to the scores
            param.add_(torch.randn(param.shape, generator=generator) * (0.1 if name.endswith("_bank") else 0.5))
    tokens = torch.randint(2, 1024, (64 * 7 + 1,), generator=generator)
    tokens[[5, 60, 61, 200, 330]] = BOS  # a document over the 64-token mark (200 -> 330: pieces of 64 and 66)
    data = tgpt.ValidationData(tokens.numpy().astype(np.uint16), torch.ones(64 * 7, dtype=torch.int32))
    total, batch_tokens = 0.0, 64 * 3  # VAL_BATCH_SIZE / 8 per batch: windows [0, 192), [192, 384), [384, 448)
    with torch.no_grad():
        for begin in range(0, 64 * 7, batch_tokens):
            end = min(begin + batch_tokens, 64 * 7)
            cuts = sorted({begin, end} | {p for p in range(begin, end) if tokens[p] == BOS})
            pieces = [(a + 64 * k, min(a + 64 * k + 64, b)) for a, b in zip(cuts, cuts[1:])
                      for k in range(ceil(b - a))]
            for a, b in pieces:
                logits = model.logits_from_hidden(model.forward_hidden(tokens[None, a:b]))
                total += torch.nn.functional.cross_entropy(logits[0], tokens[a + 1:b + 1], reduction="sum").item()
    want = total / (64 * 7)
    periodic = tgpt.plain_eval(h, tgpt.DistInfo(0, 1, CPU), model, data)
    assert periodic[0] == pytest.approx(want, rel=2e-4)  # RoPE at row offsets: equal in exact arithmetic
    forward = model.forward_hidden
    final = tgpt.plain_eval(h, tgpt.DistInfo(0, 1, CPU), model, data,
                            tgpt.scoring_loss_sum(model, forward, 4), 3, 64)  # 3 sequences a batch
    assert final[0] == pytest.approx(want, rel=2e-4)
    dense = tgpt.plain_eval(tgpt.replace(h, train_loader="shuffled"), tgpt.DistInfo(0, 1, CPU), model, data)
    assert abs(dense[0] - want) > 0.02, dense[0] - want  # 7x the tolerance above


def ceil(tokens):
    return -(-tokens // 64)
