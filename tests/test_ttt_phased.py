"""TTT_MODE=lora_phased (SPEC_0427 §10) on a tiny random 2026-04-27 model and synthetic documents: each target scored
once and before anything trains on it (across phases), the LoRA forward against dense weights, which documents are
scored before each phase and trained on in it (§10.5's rule made deterministic) at 1 and 4 gloo ranks, the
schedule at the record's 8 ranks, a batch of another size on fresh adapters (§12), and ranks that finish early
waiting in a collective, not on files."""
import dataclasses
import functools
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from tgpt_util import REPO, run_env, tgpt  # noqa: F401 (fixture)

sys.path.insert(0, str(REPO / "tests" / "scripts"))
from ttt_phased_ranks import DELAY, TTT_ENV, Quiet, random_model, run_phased, synthetic_tokens  # noqa: E402


def spec_documents(tokens):
    """SPEC_0427 §10.2 written out: a document from each BOS (and target 0) through the next BOS, inclusive."""
    ids = tokens.tolist()
    starts = [0] + [p for p in range(1, len(ids) - 1) if ids[p] == 1]
    return list(zip(starts, starts[1:] + [len(ids) - 1]))  # [first target, end target)


def spec_phases(tokens, batch: int, boundaries, world_size: int = 1):
    """SPEC_0427 §10.2/§10.5 written out: docs sorted by length, batched, queue longest batch first. A rank adds a
    batch's docs to the shared count when it has scored it; once the count reaches a boundary every rank finishes
    the batch it holds: the batch that crossed it and the W - 1 after it in the queue (the other ranks') are scored,
    and the phase trains on the scored docs in ascending-length order, the first `boundary`; a phase with nothing
    left to score after it does not run. -> (docs, queue, [(queue batches scored before the phase, its docs)])."""
    docs = spec_documents(tokens)
    ascending = sorted(range(len(docs)), key=lambda d: (docs[d][1] - docs[d][0], d))
    batches = [ascending[i:i + batch] for i in range(0, len(ascending), batch)]
    queue = sorted(batches, key=lambda b: -max(docs[d][1] - docs[d][0] for d in b))
    phases, count, pending = [], 0, list(boundaries)
    for q, docs_q in enumerate(queue):
        count += len(docs_q)
        while pending and count >= pending[0]:
            held = min(len(queue), q + world_size)  # the crossing batch, then the W - 1 the other ranks hold
            if held < len(queue):
                scored = {d for b in queue[:held] for d in b}
                phases.append((held, [d for d in ascending if d in scored][:pending[0]]))
            pending.pop(0)
    return docs, queue, phases


@pytest.fixture(scope="module")
def base(tgpt):
    return run_phased(tgpt, synthetic_tokens())


def first_call_scoring(record, targets: set) -> int:
    return next(i for i, (scored, _, _) in enumerate(record["scores"]) if targets & set(scored.tolist()))


def test_each_target_is_scored_once_and_the_phases_run(base):
    tokens, record = synthetic_tokens(), base
    scored = torch.cat([targets for targets, _, _ in record["scores"]])
    assert torch.equal(scored.sort().values, torch.arange(tokens.numel() - 1))  # every target, once
    nll = torch.cat([values for _, values, _ in record["scores"]]).double()
    assert record["result"][0] == pytest.approx(nll.mean().item(), rel=1e-9)
    _, _, phases = spec_phases(tokens, 3, (3, 7))
    assert [len(docs) for docs in record["gathered"]] == [3, 7] and len(phases) == 2
    assert record["gathered"] == [docs for _, docs in phases]


def perturbed(tokens, first: int, end: int, seed: int = 1):
    """tokens with positions [first, end) redrawn (no BOS: the documents stay the same)."""
    out = tokens.clone()
    out[first:end] = torch.randint(2, 1024, (end - first,), generator=torch.Generator().manual_seed(seed)).int()
    assert not torch.equal(out, tokens)
    return out


def assert_same_scores_before(base, other, call: int):
    for (targets_a, nll_a, _), (targets_b, nll_b, _) in zip(base["scores"][:call], other["scores"][:call]):
        assert torch.equal(targets_a, targets_b) and torch.equal(nll_a, nll_b)


def test_scores_never_depend_on_later_chunks_or_later_documents(tgpt, base):
    """Redrawing the tokens of a document's third chunk changes no score made before that chunk is scored (its own
    first two chunks included) nor any other document's score in its batch; redrawing a document scored after both
    phases changes no earlier score; redrawing one that phase 1 trains on does change later documents' scores."""
    tokens, chunk = synthetic_tokens(), 16
    docs, queue, phases = spec_phases(tokens, 3, (3, 7))
    long_doc = next(d for d in queue[0] if docs[d][1] - docs[d][0] > 3 * chunk)
    first = docs[long_doc][0] + 2 * chunk  # targets [first, first + 16) = tokens [first + 1, first + 17)
    other = run_phased(tgpt, perturbed(tokens, first + 1, first + chunk + 1))
    call = first_call_scoring(base, set(range(first, first + chunk)))
    assert_same_scores_before(base, other, call)
    same_batch = {t for d in queue[0] if d != long_doc for t in range(*docs[d])}
    for (targets, nll_a, _), (_, nll_b, _) in zip(base["scores"][call:], other["scores"][call:]):
        keep = torch.tensor([t in same_batch for t in targets.tolist()], dtype=torch.bool)
        assert torch.equal(nll_a[keep], nll_b[keep])
    assert not torch.equal(base["scores"][call][1], other["scores"][call][1])  # the redrawn targets' own scores
    late = queue[-1][0]  # scored after both phases
    other = run_phased(tgpt, perturbed(tokens, docs[late][0] + 1, docs[late][1]))
    assert_same_scores_before(base, other, first_call_scoring(base, set(range(*docs[late]))))
    trained = phases[0][1][0]  # in phase 1's SGD: later batches see it through the base model
    other = run_phased(tgpt, perturbed(tokens, docs[trained][0] + 1, docs[trained][1]))
    call = first_call_scoring(base, {t for d in queue[phases[0][0]] for t in range(*docs[d])})
    assert any(not torch.equal(a[1], b[1]) for a, b in zip(base["scores"][call:], other["scores"][call:]))


def test_lora_forward_is_the_base_forward_at_b_zero_and_dense_weights_otherwise(tgpt):
    """Per document row d: B = 0 gives the base model's hidden states and logits exactly; random A, B on every slot
    and kind give the base model with W_q, W_k, W_v + (alpha/r) B A, o's and MLP's (alpha/r) B A on their branch input
    added before the branch scale, and the head's logits from E + (alpha/r) B A (SPEC_0427 §10.4)."""
    h = tgpt.Hyperparameters.from_env(dict(TTT_ENV, NUM_LOOPS="0"))
    model, rows, n = random_model(tgpt, h), 2, h.num_layers
    model.looping = False
    lora = tgpt.BatchedLoRA(h, n, rows, torch.device("cpu"))
    ids = torch.randint(2, 1024, (rows, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert torch.equal(model.forward_hidden(ids, lora=lora), model.forward_hidden(ids))
        hidden = model.forward_hidden(ids)
        assert torch.equal(model.logits_from_hidden(hidden, lora=lora), model.logits_from_hidden(hidden))
        for b in lora.b.values():
            b.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(4))
        logits = model.logits_from_hidden(model.forward_hidden(ids, lora=lora), lora=lora)
    dense = {kind: lora.scale * lora.b[kind] @ lora.a[kind] for kind in lora.a}  # (slots, rows, out, in)
    for d in range(rows):
        reference = random_model(tgpt, h)
        reference.looping = False
        with torch.no_grad():
            for i, block in enumerate(reference.blocks):
                reference.qo_bank[i] += dense["q"][i, d]
                reference.kv_bank[i] += dense["k"][i, d]
                reference.kv_bank[n + i] += dense["v"][i, d]
                block.attn.register_forward_hook(functools.partial(
                    lambda blk, w, module, args, out: out + blk.attn_scale * F.linear(args[0], w), block,
                    dense["o"][i, d]))
                block.mlp_op = functools.partial(
                    lambda blk, w, x, w_up, w_down: tgpt.leaky_relu_sq_mlp(x, w_up, w_down)
                    + blk.mlp_scale * F.linear(x, w), block, dense["mlp"][i, d])
            x = tgpt.rms_norm(reference.forward_hidden(ids[d:d + 1]))
            expected = 30.0 * torch.tanh(F.linear(x, reference.tok_emb.weight + dense["head"][0, d]) / 30.0)
        assert torch.allclose(logits[d:d + 1], expected, rtol=1e-4, atol=1e-4), (logits[d] - expected[0]).abs().max()
        assert not torch.allclose(logits[d:d + 1], model.logits_from_hidden(model.forward_hidden(ids[d:d + 1])),
                                  atol=1e-2)


def test_lora_nll_reads_the_first_rows_of_the_eval_length_rope_table(tgpt):
    """make_lora_nll gives the model the first T rows of the EVAL_SEQ_LEN (128) RoPE table, so that one compiled graph
    serves every row length: the nll equals, bit for bit, the model's own length-T table's, at each TTT row length,
    and the tables are inputs (no length-16 table exists until the reference's forward makes one)."""
    h = tgpt.Hyperparameters.from_env(TTT_ENV)
    model = random_model(tgpt, h)
    lora = tgpt.BatchedLoRA(h, sum(map(len, model.layer_orders[True])), 2, torch.device("cpu"))
    for b in lora.b.values():
        b.data.normal_(0.0, 0.3, generator=torch.Generator().manual_seed(4))
    nll = tgpt.make_lora_nll(h, tgpt.DistInfo(0, 1, torch.device("cpu")), model, lora)
    for length in (16, 64, 128):
        ids = torch.randint(2, 1024, (2, length), generator=torch.Generator().manual_seed(length))
        picks, y = torch.arange(length - 16, length).repeat(2, 1), ids[:, :16].flip(1)
        with torch.no_grad():
            got = nll(ids, y, picks)
            assert length != 16 or (16, torch.float32, torch.device("cpu")) not in model.rope_cache  # not built yet
            hidden = model.forward_hidden(ids, lora=lora).gather(1, picks[..., None].expand(-1, -1, h.model_dim))
            expected = F.cross_entropy(model.logits_from_hidden(hidden, lora=lora).flatten(0, 1), y.flatten(),
                                       reduction="none").view_as(y)
        assert torch.equal(got, expected), (length, (got - expected).abs().max())


# 1 process, and 4 gloo ranks: several ranks besides the slow rank 0, each holding a batch when a phase starts. 2 ranks
# run the same code, for ~20 CPU-s of start-up more.
@pytest.mark.parametrize("world_size", [1, 4])
def test_the_ranks_score_and_train_on_the_spec_documents_at_each_phase(tgpt, tmp_path, world_size):
    """tests/scripts/ttt_phased_ranks.py on 1 process or on W gloo ranks (40 documents in 14 batches of 3, the
    longest alone first; rank 0 slowed by DELAY per batch): over all ranks, exactly the targets of the queue batches
    that spec_phases says are scored before phase k are scored before it (each target once, overall), every rank
    trains on spec_phases' documents, all ranks report the same result, and none opens a file during the eval. On
    several ranks the others wait for rank 0 inside collectives (>= one DELAY per phase each)."""
    tokens = synthetic_tokens(docs=40)
    docs, queue, phases = spec_phases(tokens, 3, (3, 7), world_size)
    assert len(queue) == 14 and [held for held, _ in phases] == [1 + world_size, 2 + world_size]
    if world_size == 1:
        records = [run_phased(tgpt, tokens)]
    else:
        out = tmp_path / "rank"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={world_size}",
                   str(REPO / "tests" / "scripts" / "ttt_phased_ranks.py"), str(out), "40"]
        proc = subprocess.run(command, env=run_env({}), capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        records = [torch.load("%s.%d" % (out, rank)) for rank in range(world_size)]
    targets_of = lambda batches: sorted(t for b in batches for d in b for t in range(*docs[d]))  # noqa: E731
    bounds = [0] + [held for held, _ in phases] + [len(queue)]
    for k in range(len(phases) + 1):  # the targets scored between phase k - 1 and phase k, over the ranks
        scored = sorted(t for record in records for targets, _, ran in record["scores"] if ran == k
                        for t in targets.tolist())
        assert scored == targets_of(queue[bounds[k]:bounds[k + 1]]), k
    for record in records:
        assert record["gathered"] == [docs_k for _, docs_k in phases]
        assert record["result"] == records[0]["result"]
        assert record.get("opened", []) == []
    for record in records[1:]:
        waited = sum(seconds for _, seconds in record["waits"])
        assert waited >= 2 * DELAY, record["waits"]  # rank 0 takes each segment's first batch


def test_the_schedule_at_8_ranks_gives_the_records_phases_and_balances_the_ranks(tgpt):
    """The record's eval (SPEC_0427 §10.2, §10.5): 50,000 documents in 782 batches, the first of 16, boundaries 833,
    1,666, 2,500; its seed-42 log paused with 1,296 / 2,128 / 2,960 documents scored on 8 GPUs (1 GPU: the crossing
    batch alone). Between phases each batch goes to the rank whose batches so far cost least (ties: the lower)."""
    docs = [16] + [64] * 781
    for world_size, scored in ((8, [1296, 2128, 2960]), (1, [848, 1680, 2512])):
        phases, assignment = tgpt.ttt_schedule(docs, [1.0] * 782, (833, 1666, 2500), world_size)
        assert [boundary for _, boundary in phases] == [833, 1666, 2500]
        assert [sum(docs[:held]) for held, _ in phases] == scored
        assert len(assignment) == 4 and all(len(ranks) == world_size for ranks in assignment)
        assert sorted(q for ranks in assignment for batches in ranks for q in batches) == list(range(782))
    # costs 10, 9, 2, 2, 2, 2, 7 on 2 ranks, one phase after the first 4 batches, then after all 7 (no phase)
    phases, assignment = tgpt.ttt_schedule([1] * 7, [10, 9, 2, 2, 2, 2, 7], (3, 7), 2)
    assert phases == [(4, 3)]  # boundary 7 is reached only by the last batch: nothing left after it
    assert assignment == [[[0, 3], [1, 2]], [[4, 6], [5]]]  # loads 12/11, then 9/2 (the 7 to the free rank 0)


def test_a_batch_of_another_size_gets_fresh_adapters_and_leaves_the_reusable_ones(tgpt):
    """SPEC_0427 §12: the queue's first batch (here the 1 longest of 40 documents; the record's: 16) runs on a fresh
    LoRA; the next batch of the same rank starts from the reusable adapters' A as they were (their first draw)."""
    record = run_phased(tgpt, synthetic_tokens(docs=40))
    h = tgpt.Hyperparameters.from_env(TTT_ENV)
    first = tgpt.BatchedLoRA(h, sum(map(len, random_model(tgpt, h).layer_orders[True])), 3, torch.device("cpu")).a
    assert all(torch.equal(record["batch_a"][1][kind], first[kind]) for kind in first)
    assert not any(torch.equal(record["batch_a"][0][kind], first[kind]) for kind in first)


def test_the_settings_are_checked_at_start_up(tgpt):
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"TTT_MODE": "lora", "TTT_PHASE_DOCS": "833,800", "TTT_LORA_CHUNK": "4096",
                                       "TTT_DOC_BATCH": "0", "TTT_LORA_WD": "-1"})
    assert sorted(info.value.errors) == [
        "TTT_DOC_BATCH=0 must be >= 1", "TTT_LORA_WD=-1.0 must be >= 0", "TTT_MODE='lora': expected one of full, lora_phased",
        "TTT_PHASE_DOCS='833,800': expected increasing positive integers like '833,1666,2500', or empty"]
    assert tgpt.Hyperparameters.from_env({"TTT_PHASE_DOCS": ""}).ttt_phase_docs == ""
    with pytest.raises(tgpt.ConfigError) as info:  # the chunk's context is checked where the phased TTT runs
        tgpt.Hyperparameters.from_env({"TTT_MODE": "lora_phased", "ROPE_NTK": "0", "TTT_LORA_CHUNK": "4096"})
    assert info.value.errors == ["TTT_LORA_CHUNK=4096 must be <= EVAL_SEQ_LEN=2048 (a chunk's context)"]


@pytest.mark.parametrize("cuda_graphs", [False, True])
def test_warm_up_runs_the_sgd_and_every_step_shape_and_leaves_no_trace(tgpt, monkeypatch, cuda_graphs):
    """warm_up_lora_ttt on random tokens: one train-mode forward + backward of the base model on a packed row of this
    rank's share of a TTT_CHUNK_TOKENS chunk (with the document-aware cu_seqlens), one LoRA training step at every
    row count a step can have (TTT_DOC_BATCH rows, or a power of 2 >= 2) and every row length, most rows first; with
    CUDA graphs each shape's step is captured right after it ran (its compiles done); afterwards the base weights are
    bit-identical, frozen, without gradients and in eval mode, the adapters have no gradients, the AdamW state is a
    fresh one's (zeros, step 0) and the adapters are the first draw again (B = 0, A as a fresh BatchedLoRA's)."""
    h = tgpt.Hyperparameters.from_env(dict(TTT_ENV, TTT_CHUNK_TOKENS="256", TTT_BATCH_SEQS="1"))
    dist_info = tgpt.DistInfo(0, 1, torch.device("cpu"))
    model = random_model(tgpt, h).requires_grad_(False).eval()
    before = {name: value.clone() for name, value in model.state_dict().items()}
    slots = sum(map(len, model.layer_orders[True]))
    lora, fresh = (tgpt.BatchedLoRA(h, slots, h.ttt_doc_batch, torch.device("cpu")) for _ in range(2))
    optimizer = torch.optim.AdamW(lora.parameters(), lr=h.ttt_lora_lr, betas=(0.0, 0.99), eps=1e-10,
                                  weight_decay=h.ttt_lora_wd)
    forwards, shapes = [], []
    model_forward = type(model).forward

    def recorded_forward(self, x, y, *packed):
        forwards.append((x.shape, self.training, [p.requires_grad for p in self.parameters()], packed))
        return model_forward(self, x, y, *packed)
    monkeypatch.setattr(type(model), "forward", recorded_forward)
    nll = tgpt.make_lora_nll(h, dist_info, model, lora)
    assert not tgpt.lora_cuda_graphs(h, dist_info)  # CPU: no CUDA graphs (with or without TORCH_COMPILE=1)
    assert not tgpt.lora_cuda_graphs(dataclasses.replace(h, torch_compile="1"), dist_info)
    stepper = tgpt.LoraStepper(h, dist_info, lambda x, y, picks: shapes.append(tuple(x.shape)) or nll(x, y, picks),
                               optimizer)
    assert stepper.pool is None
    if cuda_graphs:  # what the warm-up captures, and when (a CUDA graph itself needs a GPU)
        stepper.pool = "pool"
        monkeypatch.setattr(stepper, "capture", lambda *inputs: shapes.append(("captured", tuple(inputs[0].shape))))
    assert tgpt.lora_shapes(h) == [(3, 64), (3, 128), (2, 64), (2, 128)]  # 3 or 2 rows (never 1), EVAL_SEQ_LEN=128's
    record = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27"})  # 64, 32, … 2 rows by 64, 128, … 2,048 tokens
    assert tgpt.lora_shapes(record) == [(1 << r, 1 << t) for r in range(6, 0, -1) for t in range(6, 12)]
    tgpt.warm_up_lora_ttt(h, dist_info, model, lora, stepper, tgpt.lora_shapes(h))
    assert len(forwards) == 1
    shape, training, grads, (cu_seqlens,) = forwards[0]
    assert shape == (1, h.train_seq_len) and training and all(grads)  # TTT_BATCH_SEQS=1 of 256 // 64 sequences
    assert cu_seqlens.numel() % tgpt.CU_SEQLENS_BUCKET == 0 and int(cu_seqlens[-1]) == h.train_seq_len
    every = [(3, 64), (3, 128), (2, 64), (2, 128)]
    assert shapes == [step for shape in every for step in [shape, ("captured", shape)][:1 + cuda_graphs]]
    assert all(torch.equal(value, before[name]) for name, value in model.state_dict().items())
    assert not model.training and all(not p.requires_grad and p.grad is None for p in model.parameters())
    assert all(p.grad is None for p in lora.parameters()) and len(optimizer.state) == 12  # a and b of 6 kinds
    assert all(not value.any() for state in optimizer.state.values() for value in state.values())
    assert all(torch.equal(lora.a[k], fresh.a[k]) and not lora.b[k].any() for k in lora.a)


def full_rows_batch(tgpt, h, nll_fn, lora, optimizer, tokens, target_bytes, spans, sums, calls):
    """lora_ttt_batch as SPEC_0427 §10.4 reads, every row computed at every step (rows of finished documents and
    padding too: they add zeros to the scores and the loss)."""
    chunk, ctx = h.ttt_lora_chunk, h.effective_eval_seq_len
    first, lengths = spans[:, 0], spans[:, 1] - spans[:, 0]
    longest, offsets = int(lengths.max()), torch.arange(chunk)
    lora.reset(fresh_a=False)
    optimizer.state.clear()
    for step in range(-(-longest // chunk)):
        end = lengths.clamp(max=(step + 1) * chunk)
        new, width = (end - step * chunk).clamp_min(0), end.clamp(max=ctx)
        window = first + end - width
        positions = torch.arange(tgpt.lora_context((step + 1) * chunk, ctx))
        x = torch.where(positions < width[:, None], tokens[(window[:, None] + positions) % tokens.numel()], 0)
        picks = (width[:, None] - chunk + offsets).clamp_min(0)
        scored, targets = offsets >= chunk - new[:, None], window[:, None] + picks
        nll = nll_fn(x.long(), tokens[targets + 1].long(), picks)
        calls.append(x.size(0))
        tgpt.accumulate_scores(sums, nll.detach(), scored, targets, target_bytes)
        if (step + 1) * chunk < longest:
            optimizer.zero_grad(set_to_none=True)
            (torch.where(scored, nll, 0.0) * ((end < lengths).float() / new.clamp_min(1))[:, None]).sum().backward()
            optimizer.step()


def test_a_step_computes_only_the_rows_whose_documents_go_on_and_changes_nothing_else(tgpt):
    """Two batches (the second warm-starts A from the first) through lora_ttt_batch and through the plain every-row
    version: equal scores, equal adapters and AdamW states after each; lora_ttt_batch's steps ran 4, 4 and then 2 of
    the 5 rows (padding first, lengths ascending: 20, 70 and 150 targets in 16-token chunks; never 1 row: a compiled
    forward would specialize on it)."""
    h = tgpt.Hyperparameters.from_env(dict(TTT_ENV, TTT_DOC_BATCH="5"))
    dist_info, tokens = tgpt.DistInfo(0, 1, torch.device("cpu")), synthetic_tokens(seed=3, docs=30)
    # fp64: rounding that depends on the number of rows stays far below the tolerance (Adam amplifies fp32's)
    model = random_model(tgpt, h).double().requires_grad_(False).eval()
    target_bytes = torch.randint(1, 4, (tokens.numel() - 1,), generator=torch.Generator().manual_seed(0))
    runs = []
    for batch in (tgpt.lora_ttt_batch, None):
        torch.manual_seed(0)
        lora = tgpt.BatchedLoRA(h, sum(map(len, model.layer_orders[True])), 5, torch.device("cpu")).double()
        optimizer = torch.optim.AdamW(lora.parameters(), lr=0.01, betas=(0.0, 0.99), eps=1e-10, weight_decay=0.5)
        nll, calls, sums = tgpt.make_lora_nll(h, dist_info, model, lora), [], []
        stepper = tgpt.LoraStepper(h, dist_info, lambda x, y, picks: calls.append(x.size(0)) or nll(x, y, picks),
                                   optimizer)
        for spans in (torch.tensor([[0, 0], [0, 0], [500, 520], [1000, 1070], [2000, 2150]]),
                      torch.tensor([[0, 0], [40, 70], [300, 360], [700, 790], [1200, 1330]])):
            sums.append(torch.zeros(3, dtype=torch.float64))
            if batch:
                batch(h, lora, stepper, tokens, target_bytes, spans, sums[-1])
            else:
                full_rows_batch(tgpt, h, nll, lora, optimizer, tokens, target_bytes, spans, sums[-1], calls)
            sums.append([p.detach().clone() for p in lora.parameters()] +
                        [v.clone() for state in optimizer.state.values() for v in state.values()])
        runs.append((calls, sums))
    (calls, got), (full_calls, expected) = runs
    assert calls[:10] == [4, 4, 2, 2, 2, 2, 2, 2, 2, 2] and full_calls[:10] == [5] * 10
    # the steps' (rows, row length): 64 tokens while a window ends by target 64, then EVAL_SEQ_LEN's 128
    assert tgpt.lora_steps(h, [150, 20, 70]) == [(4, 64)] * 2 + [(2, 64)] * 2 + [(2, 128)] * 6
    for a, b in zip(got, expected):
        a, b = (a, b) if isinstance(a, list) else ([a], [b])
        assert len(a) == len(b) and all(torch.allclose(u, v, rtol=0.0, atol=1e-9) for u, v in zip(a, b))
    assert got[0][1] == expected[0][1] == 20 + 70 + 150  # every target of the batch scored


def test_the_warm_up_runs_exactly_the_shapes_the_loop_meets(tgpt, monkeypatch):
    """With the compile on (torch.compile a no-op here), phased_ttt_eval's warm-up runs the LoRA step at the
    (rows, row length)s of this rank's batches, in lora_shapes's order (most rows first); every step of the loop then
    meets a shape the warm-up ran, and the warm-up ran no shape the loop does not meet."""
    h = tgpt.Hyperparameters.from_env(TTT_ENV)
    calls, warmed = [], []
    make_lora_nll, warm_up_lora_ttt = tgpt.make_lora_nll, tgpt.warm_up_lora_ttt

    def counted_nll(*args):
        nll = make_lora_nll(*args)
        return lambda x, y, picks: calls.append(tuple(x.shape)) or nll(x, y, picks)

    def recorded_warm_up(*args):
        warmed.extend(args[-1])
        warm_up_lora_ttt(*args)
        calls.clear()  # the loop's calls from here on
    monkeypatch.setattr(tgpt, "compile_enabled", lambda *args: True)
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)
    monkeypatch.setattr(tgpt, "make_lora_nll", counted_nll)
    monkeypatch.setattr(tgpt, "warm_up_lora_ttt", recorded_warm_up)
    tokens = synthetic_tokens(seed=1, docs=8)  # no batch holds 3 documents of more than 64 targets: no (3, 128) step
    tgpt.phased_ttt_eval(h, tgpt.DistInfo(0, 1, torch.device("cpu")), Quiet(), random_model(tgpt, h), tokens,
                         torch.ones(tokens.numel() - 1, dtype=torch.int32), {})
    assert calls and warmed == [(3, 64), (2, 64), (2, 128)] and set(calls) == set(warmed)


def lora_step_setup(tgpt, rows=3):
    """A LoraStepper of a random tiny model (TTT_ENV, fp32, CPU) whose nll calls are recorded, and its AdamW."""
    h = tgpt.Hyperparameters.from_env(TTT_ENV)
    dist_info, model = tgpt.DistInfo(0, 1, torch.device("cpu")), random_model(tgpt, h).requires_grad_(False).eval()
    lora = tgpt.BatchedLoRA(h, sum(map(len, model.layer_orders[True])), rows, torch.device("cpu"))
    optimizer = torch.optim.AdamW(lora.parameters(), lr=0.01, betas=(0.0, 0.99), eps=1e-10, weight_decay=0.5)
    nll, calls = tgpt.make_lora_nll(h, dist_info, model, lora), []
    stepper = tgpt.LoraStepper(h, dist_info, lambda x, y, picks: calls.append(tuple(x.shape)) or nll(x, y, picks),
                               optimizer)
    return h, lora, optimizer, stepper, calls


def step_inputs(h, rows, length, seed):
    generator = torch.Generator().manual_seed(seed)
    x, y = (torch.randint(2, 1024, (rows, n), generator=generator) for n in (length, h.ttt_lora_chunk))
    picks = (length - h.ttt_lora_chunk + torch.arange(h.ttt_lora_chunk)).repeat(rows, 1)
    scored = torch.rand(rows, h.ttt_lora_chunk, generator=generator) < 0.7
    return x, y, picks, scored, torch.rand(rows, generator=generator)


def test_a_training_step_of_a_captured_shape_replays_its_graph_on_copies_of_its_inputs(tgpt):
    """LoraStepper: a training step whose (rows, length) was captured copies its inputs into the graph's own tensors,
    replays the graph and returns the graph's nll; a scoring step (train=False) of that shape and a training step of
    another shape run the step itself, and only a training step changes the adapters. (A CUDA graph needs a GPU:
    the graph here is a stand-in whose replay runs the step on the graph's inputs, as a real replay does.)"""
    h, lora, optimizer, stepper, calls = lora_step_setup(tgpt)
    static, out, replays = step_inputs(h, 3, 64, seed=0), torch.zeros(3, h.ttt_lora_chunk), []

    class StandIn:
        def replay(self):
            replays.append(1)
            out.copy_(stepper.run(*static))
    stepper.graphs[(3, 64)] = (StandIn(), static, out)
    inputs = step_inputs(h, 3, 64, seed=1)
    got = stepper(*inputs, True)
    assert got is out and replays == [1] and calls == [(3, 64)]
    assert all(torch.equal(a, b) for a, b in zip(static, inputs))
    before = [p.detach().clone() for p in lora.parameters()]
    scores = stepper(*step_inputs(h, 3, 64, seed=2), False)
    assert replays == [1] and calls == [(3, 64)] * 2 and scores is not out
    assert all(torch.equal(p, q) for p, q in zip(lora.parameters(), before))  # scored only, not trained on
    stepper(*step_inputs(h, 2, 64, seed=3), True)
    assert replays == [1] and calls[-1] == (2, 64)
    assert any(not torch.equal(p, q) for p, q in zip(lora.parameters(), before))


def test_reset_gives_a_fresh_adamw_state_in_place(tgpt):
    """LoraStepper.reset() zeroes every AdamW state tensor in place (a captured step holds their addresses): the next
    step equals, bit for bit, a step of a fresh AdamW state (what the record's new optimizer per batch starts from)."""
    h, lora, optimizer, stepper, _ = lora_step_setup(tgpt)
    for seed in (0, 1):
        stepper(*step_inputs(h, 3, 64, seed), True)
    state = [value for values in optimizer.state.values() for value in values.values()]
    kept = [p.detach().clone() for p in lora.parameters()]
    stepper.reset()
    after = [value for values in optimizer.state.values() for value in values.values()]
    assert len(after) == len(state) and all(a is b and not a.any() for a, b in zip(after, state))
    stepper(*step_inputs(h, 3, 64, seed=2), True)
    got = [p.detach().clone() for p in lora.parameters()]
    with torch.no_grad():
        for p, value in zip(lora.parameters(), kept):
            p.copy_(value)
    optimizer.state.clear()
    stepper(*step_inputs(h, 3, 64, seed=2), True)
    assert all(torch.equal(a, p) for a, p in zip(got, lora.parameters()))
    assert any(not torch.equal(a, b) for a, b in zip(got, kept))  # the step moved the adapters
