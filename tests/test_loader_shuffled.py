"""CPU tests of TRAIN_LOADER=shuffled (SPEC_0409 §3): token-for-token equality with a plain reference of the
algorithm, sync and async, rewinds, seeding, errors and an end-to-end tiny training run."""
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from test_loader import ListLogger, StandInDistInfo, loader_mod, make_h, write_shard  # noqa: F401 (fixture)
from tgpt_util import REPO, run_env, tiny_data  # noqa: F401 (fixture)

SEQ_LEN = 8
ROWS = 5  # sequences per rank and micro-step: odd, so resets fall inside batches
BATCH_TOKENS = 8 * ROWS * SEQ_LEN  # world_size * grad_accum = 8
# 16 unequal shards. 9 = SEQ_LEN + 1 tokens: one sequence and no phase draw (shards 0, 1, 9: with W=8, rank 1
# holds only such shards); 10 and 11: phases in [0, 1] and [0, 2]; the rest: phases in [0, SEQ_LEN - 1].
SHARD_SIZES = (9, 9, 10, 73, 17, 40, 120, 33, 25, 9, 64, 11, 50, 18, 90, 30)


def write_shards(directory, sizes=SHARD_SIZES):
    """Shards whose tokens count up across files, so every window of the data is distinct."""
    directory.mkdir(parents=True, exist_ok=True)
    paths, first = [], 1
    for index, size in enumerate(sizes):
        path = directory / f"fineweb_train_{index:06d}.bin"
        write_shard(path, range(first, first + size))
        paths.append(path)
        first += size
    return paths


def shuffled_h(directory, **overrides):
    return make_h(directory, **dict(dict(train_loader="shuffled", train_batch_tokens=BATCH_TOKENS,
                                         train_seq_len=SEQ_LEN), **overrides))


def reference(paths, rank, world_size, rows, count, seed=None):
    """SPEC_0409 §3 as written: lists popped from the end, rem snapshotted per batch and decremented, and the
    weighted shard choice spelled out (one random() double, the first index whose normalised cdf exceeds it)
    instead of calling Generator.choice. Returns the (x, y) batches, the (file, start) plan of each and the rows
    (batch, row) at which every list had run out, so all shards were reset."""
    files = sorted(paths)[rank::world_size]
    shards = [np.fromfile(path, dtype="<u2", offset=1024) for path in files]
    rng = np.random.Generator(np.random.PCG64(rank if seed is None else seed))
    starts = [[] for _ in shards]

    def reset(i):
        max_phase = min(SEQ_LEN - 1, max(0, len(shards[i]) - SEQ_LEN - 1))
        phase = rng.integers(max_phase + 1) if max_phase > 0 else 0
        permutation = rng.permutation((len(shards[i]) - 1 - phase) // SEQ_LEN)
        starts[i] = [int(phase + k * SEQ_LEN) for k in permutation]

    for i in range(len(shards)):
        reset(i)
    batches, plans, resets = [], [], []
    for step in range(count):
        rem = np.array([len(s) for s in starts], dtype=np.float64)
        xs, ys, plan = [], [], []
        for row in range(rows):
            if rem.sum() <= 0:
                resets.append((step, row))
                for i in range(len(shards)):
                    reset(i)
                rem = np.array([len(s) for s in starts], dtype=np.float64)
            cdf = np.cumsum(rem / rem.sum())
            cdf /= cdf[-1]
            i = int(np.searchsorted(cdf, rng.random(), side="right"))
            start = starts[i].pop()
            rem[i] -= 1
            window = shards[i][start:start + SEQ_LEN + 1].astype(np.int64)
            xs.append(window[:-1])
            ys.append(window[1:])
            plan.append((files[i], start))
        batches.append((torch.from_numpy(np.stack(xs)), torch.from_numpy(np.stack(ys))))
        plans.append(plan)
    return batches, plans, resets


def collect(loader, count):
    return [tuple(tensor.clone() for tensor in loader.next_batch()) for _ in range(count)]


def assert_same_batches(actual, expected):
    assert len(actual) == len(expected)
    for step, ((x, y), (x_ref, y_ref)) in enumerate(zip(actual, expected)):
        assert x.dtype == y.dtype == torch.int64 and x.shape == x_ref.shape and y.shape == y_ref.shape, step
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref), f"micro-step {step} differs"


def make_loader(loader_mod, h, rank=0, world_size=1, grad_accum=8, logger=None):
    dist_info = StandInDistInfo(rank=rank, world_size=world_size, grad_accum_steps=grad_accum)
    return loader_mod.make_train_loader(h, dist_info, logger or ListLogger())


# ---- the order, token for token ----

@pytest.mark.parametrize("prefetch", [False, True])
@pytest.mark.parametrize("world_size, grad_accum", [(1, 8), (1, 1), (2, 4), (8, 1)])
def test_batches_match_the_reference_for_every_rank(loader_mod, tmp_path, world_size, grad_accum, prefetch):
    paths = write_shards(tmp_path)
    rows = BATCH_TOKENS // (world_size * grad_accum) // SEQ_LEN
    count = 60 // world_size * 8 // rows + 4  # several passes over each rank's shards
    h = shuffled_h(tmp_path, train_prefetch=prefetch)
    resets_inside = 0
    for rank in range(world_size):
        with make_loader(loader_mod, h, rank, world_size, grad_accum) as loader:
            actual = collect(loader, count)
        expected, _, resets = reference(paths, rank, world_size, rows, count)
        assert_same_batches(actual, expected)
        resets_inside += sum(row > 0 for _, row in resets)
    assert resets_inside > 0  # the comparison covered resets in the middle of a batch


@pytest.mark.parametrize("queue_depth", [1, 4])
def test_async_queue_depth_does_not_change_the_batches(loader_mod, tmp_path, queue_depth):
    paths = write_shards(tmp_path)
    with make_loader(loader_mod, shuffled_h(tmp_path, train_prefetch_queue=queue_depth), 3, 8, 1) as loader:
        assert_same_batches(collect(loader, 20), reference(paths, 3, 8, ROWS, 20)[0])


def test_each_pass_draws_every_sequence_once_at_one_phase_per_shard(loader_mod, tmp_path):
    """Checked without the reference: between resets the plan is a permutation of each shard's windows."""
    paths = [str(path) for path in write_shards(tmp_path)]
    sampler = loader_mod.ShuffledSequences(paths, SEQ_LEN, 0)
    first = sampler.plan(int(sampler.left.sum()))
    second = sampler.plan(1)  # resets: the new phases may change a shard's sequence count
    second += sampler.plan(int(sampler.left.sum()))
    for one_pass in (first, second):
        assert len(set(one_pass)) == len(one_pass)
        for shard, path in enumerate(paths):
            starts = sorted(start for index, start in one_pass if index == shard)
            size = SHARD_SIZES[shard]
            phase = starts[0]
            assert 0 <= phase <= min(SEQ_LEN - 1, max(0, size - SEQ_LEN - 1)), path
            assert starts == list(range(phase, size - SEQ_LEN, SEQ_LEN)), path  # all of it, L + 1 tokens each
    assert first != second  # the reset drew new phases and permutations


def test_shards_of_exactly_one_sequence_give_the_whole_shard(loader_mod, tmp_path):
    paths = write_shards(tmp_path, sizes=(SEQ_LEN + 1,) * 3)
    shards = [np.fromfile(path, dtype="<u2", offset=1024).astype(np.int64) for path in paths]
    with make_loader(loader_mod, shuffled_h(tmp_path)) as loader:
        for x, y in collect(loader, 6):
            for row_x, row_y in zip(x.numpy(), y.numpy()):
                assert any(np.array_equal(row_x, s[:-1]) and np.array_equal(row_y, s[1:]) for s in shards)


def test_x_and_y_are_contiguous_halves_of_one_buffer(loader_mod, tmp_path):
    write_shards(tmp_path)
    with make_loader(loader_mod, shuffled_h(tmp_path, train_prefetch=False)) as loader:
        x, y = loader.next_batch()
    assert x.shape == y.shape == (ROWS, SEQ_LEN) and x.is_contiguous() and y.is_contiguous()
    assert x.untyped_storage().data_ptr() == y.untyped_storage().data_ptr()
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_rebuilt_loader_restarts_the_order(loader_mod, tmp_path):
    write_shards(tmp_path)
    h = shuffled_h(tmp_path, train_prefetch_queue=4)
    baseline = threading.active_count()
    with make_loader(loader_mod, h, 2, 8, 1) as uninterrupted:
        expected = collect(uninterrupted, 15)
    warmup = make_loader(loader_mod, h, 2, 8, 1)
    collect(warmup, 3)  # its producer ran further ahead and drew from its RNG; none of that may leak
    warmup.close()
    assert threading.active_count() == baseline
    with make_loader(loader_mod, h, 2, 8, 1) as rebuilt:
        assert_same_batches(collect(rebuilt, 15), expected)


# ---- seeding ----

def test_default_seeds_by_rank_only_and_rank_and_seed_folds_in_seed(loader_mod, tmp_path):
    paths = write_shards(tmp_path)

    def batches(rank, **fields):
        with make_loader(loader_mod, shuffled_h(tmp_path, **fields), rank, 2, 4) as loader:
            return collect(loader, 8)

    by_rank = batches(1, seed=1)
    assert_same_batches(batches(1, seed=2), by_rank)  # the record: every SEED sees the same data
    assert_same_batches(by_rank, reference(paths, 1, 2, ROWS, 8)[0])
    seeded = {seed: batches(1, seed=seed, train_shuffle_seed="rank_and_seed") for seed in (1, 2)}
    spawned = np.random.SeedSequence(1).spawn(2)[1]  # NumPy's independent child stream for rank 1 of 2
    assert_same_batches(seeded[1], reference(paths, 1, 2, ROWS, 8, seed=spawned)[0])
    different = [not all(torch.equal(a[0], b[0]) for a, b in zip(one, two))
                 for one, two in ((seeded[1], seeded[2]), (seeded[1], by_rank))]
    assert different == [True, True]


def test_config_rows(loader_mod):
    parse = loader_mod.Hyperparameters.from_env
    assert (parse({}).train_loader, parse({}).train_shuffle_seed) == ("sequential", "rank")
    assert parse({"TRAIN_LOADER": "shuffled", "TRAIN_SHUFFLE_SEED": "rank_and_seed"}).train_loader == "shuffled"
    with pytest.raises(loader_mod.ConfigError) as caught:
        parse({"TRAIN_LOADER": "random", "TRAIN_SHUFFLE_SEED": "seed"})
    assert "TRAIN_LOADER='random': expected one of sequential, shuffled, documents" in caught.value.errors
    assert "TRAIN_SHUFFLE_SEED='seed': expected one of rank, rank_and_seed" in caught.value.errors
    with pytest.raises(loader_mod.ConfigError) as caught:
        parse({"TRAIN_SHUFFLE_SEED": "rank_and_seed", "SEED": "-3"})
    assert caught.value.errors == [
        "SEED=-3 must be >= 0 with TRAIN_SHUFFLE_SEED=rank_and_seed (NumPy seeds are non-negative)",
        "TRAIN_SHUFFLE_SEED=rank_and_seed applies to TRAIN_LOADER=shuffled only, not sequential"]


def test_log_line_names_the_loader_and_this_ranks_share(loader_mod, tmp_path):
    write_shards(tmp_path)
    logger = ListLogger()
    with make_loader(loader_mod, shuffled_h(tmp_path), 1, 8, 1, logger=logger):
        pass
    assert logger.messages == ["train_data loader:shuffled shards:2/16 sequences:2 seed:rank prefetch:1 "
                               "prefetch_queue:2 pin_memory:0 copy_stream:0 (device cpu: pinning and copy stream "
                               "skipped)"]


# ---- errors ----

def test_more_ranks_than_shards_is_an_error_on_every_rank(loader_mod, tmp_path):
    write_shards(tmp_path, sizes=(40, 40, 40))
    for rank in range(8):  # ranks 0-2 would have a shard: they stop too, with the same message
        with pytest.raises(ValueError, match=r"rank r the shards \[r::WORLD_SIZE\] of the 3 matching .*"
                                             r"fineweb_train_\*\.bin: WORLD_SIZE=8 needs at least that many"):
            make_loader(loader_mod, shuffled_h(tmp_path), rank, 8, 1)


@pytest.mark.parametrize("size", [0, SEQ_LEN])
def test_shard_shorter_than_one_sequence_fails_at_construction(loader_mod, tmp_path, size):
    paths = write_shards(tmp_path, sizes=(40, size, 40))
    with pytest.raises(ValueError) as caught:
        make_loader(loader_mod, shuffled_h(tmp_path))
    assert str(caught.value) == (f"{paths[1]}: {size} tokens, fewer than the TRAIN_SEQ_LEN+1=9 of one training "
                                 f"sequence (TRAIN_LOADER=shuffled reads whole sequences)")


def test_truncated_shard_fails_at_construction(loader_mod, tmp_path):
    paths = write_shards(tmp_path, sizes=(40, 40))
    write_shard(paths[1], range(30), count=40)
    baseline = threading.active_count()
    with pytest.raises(loader_mod.ShardFormatError, match=re.escape(f"{paths[1]}: size 1084 bytes")):
        make_loader(loader_mod, shuffled_h(tmp_path))
    assert threading.active_count() == baseline


@pytest.mark.parametrize("prefetch", [True, False])
def test_read_error_in_the_producer_reaches_the_consumer_with_the_file(loader_mod, tmp_path, monkeypatch, prefetch):
    paths = write_shards(tmp_path)
    expected, plans, _ = reference(paths, 0, 1, ROWS, 40)
    bad = next(path for path in paths if not any(path == p for p, _ in plans[0] + plans[1]))
    first_bad = next(step for step, plan in enumerate(plans) if any(path == bad for path, _ in plan))
    real_memmap = np.memmap

    class Unreadable:
        def __init__(self, tokens):
            self.tokens = tokens

        def __len__(self):
            return len(self.tokens)

        def __getitem__(self, key):
            raise OSError(5, "Input/output error")

    def memmap(path, **kwargs):
        tokens = real_memmap(path, **kwargs)
        return Unreadable(tokens) if path == str(bad) else tokens

    monkeypatch.setattr(loader_mod.np, "memmap", memmap)
    baseline = threading.active_count()
    delivered = []
    start = time.perf_counter()
    with make_loader(loader_mod, shuffled_h(tmp_path, train_prefetch=prefetch, train_prefetch_queue=1)) as loader:
        with pytest.raises(loader_mod.DataError, match=re.escape(f"{bad}: reading the sequence at token")) as caught:
            for _ in range(40):
                delivered.append(tuple(tensor.clone() for tensor in loader.next_batch()))
    assert time.perf_counter() - start < 1.0
    assert isinstance(caught.value.__cause__, OSError) and "Input/output error" in str(caught.value)
    assert len(delivered) == first_bad - 1  # one batch ahead: batch first_bad fails when first_bad - 1 is asked
    assert_same_batches(delivered, expected[:len(delivered)])
    assert threading.active_count() == baseline


# ---- end to end ----

def test_tiny_training_run_with_the_shuffled_loader(tiny_data, tmp_path):
    env = dict(tiny_data["env"], TRAIN_LOADER="shuffled", ITERATIONS="4", WARMUP_STEPS="1", TRAIN_LOG_EVERY="1",
               VAL_LOSS_EVERY="2", FINAL_EVAL="0", RUN_ID="shuffled")
    out = subprocess.run([sys.executable, str(REPO / "train_gpt.py")], cwd=tmp_path, env=run_env(env),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    log = (tmp_path / "logs" / "shuffled.txt").read_text(encoding="utf-8")
    # the warm-up's loader and the rebuilt one after the rewind, each with all sequences of both shards
    sizes = [len(np.fromfile(path, dtype="<u2", offset=1024))
             for path in sorted(Path(tiny_data["env"]["DATA_PATH"]).glob("fineweb_train_*.bin"))]
    counts = [int(n) for n in re.findall(r"train_data loader:shuffled shards:2/2 sequences:(\d+) seed:rank ", log)]
    assert len(counts) == 2 and counts[0] == counts[1]
    assert sum((n - 64) // 64 for n in sizes) <= counts[0] <= sum((n - 1) // 64 for n in sizes)  # phase in [0, 63]
    losses = [float(v) for v in re.findall(r"step:\d+/4 train_loss:([\d.]+)", log)]
    assert len(losses) == 4 and all(np.isfinite(losses))
    assert len(re.findall(r"step:[024]/4 val_loss:[\d.]+ val_bpb:[\d.]+", log)) == 3
    assert "data_wait total_ms:" in log
