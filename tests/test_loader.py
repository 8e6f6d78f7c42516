"""CPU tests of the data path: shard reader, SPEC §3 training order (sync and async), producer errors,
shutdown, rewind and the validation feeder. Everything is reached through the `loader_mod` fixture."""
import importlib.util
import itertools
import signal
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parents[1]
SEQ_LEN = 4
BATCH_TOKENS = 64  # with world_size * grad_accum = 8: 8 tokens per rank per micro-step, span 9, 2 rows
SHARD_SIZES = (37, 5, 0, 50, 23)  # spans cross several shards, one shard is shorter than a span, one is empty
WORLD_GRAD_ACCUM = [(1, 8), (1, 1), (2, 4), (2, 1), (4, 2), (4, 1), (8, 1)]


@pytest.fixture(scope="module")
def loader_mod():
    """The data section lives in train_gpt.py (single-file rule); it is imported whole."""
    path = REPO / "train_gpt.py"
    spec = importlib.util.spec_from_file_location("train_gpt_loader_tests", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class StandInDistInfo:
    """Stand-in for the core's DistInfo; grad_accum_steps is a field so tests can vary it."""
    rank: int = 0
    world_size: int = 1
    grad_accum_steps: int = 8
    device: torch.device = torch.device("cpu")
    local_rank: int = 0


class ListLogger:
    def __init__(self):
        self.messages = []

    def log(self, message):
        self.messages.append(message)


def write_shard(path, tokens, magic=20240520, version=1, count=None):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (magic, version, len(tokens) if count is None else count)
    path.write_bytes(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


def write_counting_shards(directory, sizes=SHARD_SIZES, prefix="fineweb_train"):
    """Shards whose tokens count up across files (1, 2, ...), so every position in the stream is distinct."""
    directory.mkdir(parents=True, exist_ok=True)
    values = itertools.count(1)
    paths = []
    for index, size in enumerate(sizes):
        path = directory / f"{prefix}_{index:06d}.bin"
        write_shard(path, [next(values) for _ in range(size)])
        paths.append(path)
    return paths


def make_h(directory, **overrides):
    fields = dict(train_files=str(directory / "fineweb_train_*.bin"), train_batch_tokens=BATCH_TOKENS,
                  train_seq_len=SEQ_LEN, seed=1337, train_prefetch=True, train_prefetch_queue=2,
                  train_copy_stream=True, train_loader="sequential", train_shuffle_seed="rank", val_prefetch=True,
                  val_prefetch_queue=2, val_copy_stream=True)
    fields.update(overrides)
    return SimpleNamespace(**fields)


def reference_batches(paths, world_size, grad_accum, rank, count):
    """SPEC §3 written independently, the record's way: every rank materialises the whole chunk."""
    shards = [np.fromfile(path, dtype="<u2", offset=1024) for path in sorted(paths)]
    file_index, position, tokens = 0, 0, shards[0]
    local = BATCH_TOKENS // (world_size * grad_accum)
    span = local + 1
    batches = []
    for _ in range(count):
        pieces, needed = [], world_size * span
        while needed:
            if position == len(tokens):
                file_index = (file_index + 1) % len(shards)
                tokens, position = shards[file_index], 0
                continue
            take = min(needed, len(tokens) - position)
            pieces.append(tokens[position:position + take])
            position += take
            needed -= take
        chunk = torch.from_numpy(np.concatenate(pieces).astype(np.int64))
        mine = chunk[rank * span:(rank + 1) * span]
        batches.append((mine[:-1].reshape(-1, SEQ_LEN), mine[1:].reshape(-1, SEQ_LEN)))
    return batches


def collect(loader, count):
    return [tuple(tensor.clone() for tensor in loader.next_batch()) for _ in range(count)]


def assert_same_batches(actual, expected):
    assert len(actual) == len(expected)
    for step, ((x, y), (x_ref, y_ref)) in enumerate(zip(actual, expected)):
        assert x.dtype == torch.int64 and y.dtype == torch.int64, step
        assert x.shape == x_ref.shape and y.shape == y_ref.shape, step
        assert torch.equal(x, x_ref) and torch.equal(y, y_ref), f"micro-step {step} differs"


def make_loader(loader_mod, h, rank=0, world_size=1, grad_accum=8, logger=None):
    dist_info = StandInDistInfo(rank=rank, world_size=world_size, grad_accum_steps=grad_accum)
    return loader_mod.make_train_loader(h, dist_info, logger or ListLogger())


# ---- shard reader ----

def test_load_data_shard_reads_tokens(loader_mod, tmp_path):
    path = tmp_path / "fineweb_train_000000.bin"
    write_shard(path, [0, 1, 1023, 65535])
    tokens = loader_mod.load_data_shard(str(path))
    assert tokens.dtype == np.uint16 and tokens.tolist() == [0, 1, 1023, 65535]


@pytest.mark.parametrize("corruption, reason", [
    ("magic", "bad magic 20240521"),
    ("version", "unsupported version 2"),
    ("truncated", "size 1030 bytes"),
    ("extra_bytes", "size 1034 bytes"),
    ("negative_count", "token count -1"),
    ("short_header", "shorter than the 1024-byte header"),
])
def test_load_data_shard_rejects_corruption(loader_mod, tmp_path, corruption, reason):
    path = tmp_path / "fineweb_train_000000.bin"
    tokens = [1, 2, 3, 4]
    if corruption == "magic":
        write_shard(path, tokens, magic=20240521)
    elif corruption == "version":
        write_shard(path, tokens, version=2)
    elif corruption == "truncated":
        write_shard(path, tokens[:3], count=4)
    elif corruption == "extra_bytes":
        write_shard(path, tokens + [5], count=4)
    elif corruption == "negative_count":
        write_shard(path, [], count=-1)
    else:
        path.write_bytes(b"\0" * 500)
    with pytest.raises(loader_mod.ShardFormatError) as caught:
        loader_mod.load_data_shard(str(path))
    assert isinstance(caught.value, ValueError)
    assert str(path) in str(caught.value) and reason in str(caught.value)


def test_load_data_shard_rejects_short_read(loader_mod, tmp_path, monkeypatch):
    # A file that shrinks between the size check and the read: the header claims 2 more tokens than arrive.
    path = tmp_path / "fineweb_train_000000.bin"
    write_shard(path, [1, 2, 3, 4])
    checked_header = loader_mod._read_shard_header
    monkeypatch.setattr(loader_mod, "_read_shard_header", lambda name, file: checked_header(name, file) + 2)
    with pytest.raises(loader_mod.ShardFormatError, match="short read, 8 of 12 token bytes") as caught:
        loader_mod.load_data_shard(str(path))
    assert str(path) in str(caught.value)


def test_missing_train_shards_name_the_pattern(loader_mod, tmp_path):
    h = make_h(tmp_path)
    with pytest.raises(loader_mod.DataError, match="no train shards match .*fineweb_train_"):
        make_loader(loader_mod, h)


# ---- configuration ----

def test_loader_config_errors(loader_mod):
    loader_mod.Hyperparameters().validate()
    bad = loader_mod.Hyperparameters(train_prefetch_queue=0, val_prefetch_queue=-1)
    with pytest.raises(loader_mod.ConfigError) as caught:
        bad.validate()
    errors = caught.value.errors
    assert len(errors) == 2
    for name in ("TRAIN_PREFETCH_QUEUE=0", "VAL_PREFETCH_QUEUE=-1"):
        assert any(name in error for error in errors), name


# ---- SPEC §3 order ----

@pytest.mark.parametrize("world_size, grad_accum", WORLD_GRAD_ACCUM)
def test_sync_loader_matches_reference(loader_mod, tmp_path, world_size, grad_accum):
    paths = write_counting_shards(tmp_path)
    h = make_h(tmp_path, train_prefetch=False)
    count = 40  # at least 40 * 9 tokens: the 115-token stream wraps around several times
    for rank in range(world_size):
        with make_loader(loader_mod, h, rank, world_size, grad_accum) as loader:
            actual = collect(loader, count)
        assert_same_batches(actual, reference_batches(paths, world_size, grad_accum, rank, count))


@pytest.mark.parametrize("queue_depth", [1, 2, 4])
@pytest.mark.parametrize("world_size, grad_accum", WORLD_GRAD_ACCUM)
def test_async_loader_matches_sync_and_reference(loader_mod, tmp_path, world_size, grad_accum, queue_depth):
    paths = write_counting_shards(tmp_path)
    count = 40
    for rank in range(world_size):
        with make_loader(loader_mod, make_h(tmp_path, train_prefetch=False), rank, world_size, grad_accum) as sync:
            expected = collect(sync, count)
        h = make_h(tmp_path, train_prefetch=True, train_prefetch_queue=queue_depth)
        with make_loader(loader_mod, h, rank, world_size, grad_accum) as loader:
            actual = collect(loader, count)
        assert_same_batches(actual, expected)
        assert_same_batches(actual, reference_batches(paths, world_size, grad_accum, rank, count))


def test_one_rank_reads_the_spans_of_eight_ranks_in_order(loader_mod, tmp_path):
    write_counting_shards(tmp_path)
    h = make_h(tmp_path)
    with make_loader(loader_mod, h, 0, 1, 8) as single:
        single_batches = collect(single, 8 * 6)
    for rank in range(8):
        with make_loader(loader_mod, h, rank, 8, 1) as loader:
            rank_batches = collect(loader, 6)
        assert_same_batches(rank_batches, single_batches[rank::8])


def test_batches_are_contiguous_int64_rows(loader_mod, tmp_path):
    write_counting_shards(tmp_path, sizes=(1000,))
    with make_loader(loader_mod, make_h(tmp_path), 0, 1, 8) as loader:
        x, y = loader.next_batch()
    assert x.shape == y.shape == (2, SEQ_LEN) and x.is_contiguous() and y.is_contiguous()
    assert x.flatten().tolist() == list(range(1, 9)) and y.flatten().tolist() == list(range(2, 10))


def test_all_empty_shards_raise_instead_of_spinning(loader_mod, tmp_path):
    write_counting_shards(tmp_path, sizes=(0, 0))
    with make_loader(loader_mod, make_h(tmp_path, train_prefetch=False)) as loader:
        with pytest.raises(ValueError, match="every train shard is empty"):
            loader.next_batch()


# ---- producer errors and shutdown ----

@pytest.mark.parametrize("prefetch", [True, False])
@pytest.mark.parametrize("corruption", ["magic", "truncated"])
def test_corrupt_second_shard_surfaces_in_consumer(loader_mod, tmp_path, corruption, prefetch):
    baseline = threading.active_count()
    paths = write_counting_shards(tmp_path, sizes=(40, 30))
    if corruption == "magic":
        write_shard(paths[1], list(range(30)), magic=12345)
    else:
        write_shard(paths[1], list(range(20)), count=30)
    expected = reference_batches(paths[:1], 1, 8, 0, 4)  # micro-steps 0-3 lie inside the good first shard
    h = make_h(tmp_path, train_prefetch=prefetch, train_prefetch_queue=1)
    delivered = []
    start = time.perf_counter()
    with make_loader(loader_mod, h) as loader:
        with pytest.raises(loader_mod.ShardFormatError) as caught:
            for _ in range(100):
                delivered.append(tuple(tensor.clone() for tensor in loader.next_batch()))
    assert time.perf_counter() - start < 1.0
    assert str(paths[1]) in str(caught.value)
    assert ("bad magic 12345" if corruption == "magic" else "size 1064 bytes") in str(caught.value)
    assert len(delivered) == 3  # micro-step 4 needs the bad shard; being one ahead, it fails when 3 is asked for
    assert_same_batches(delivered, expected[:len(delivered)])
    assert threading.active_count() == baseline


def test_error_in_first_shard_is_raised_by_first_batch(loader_mod, tmp_path):
    baseline = threading.active_count()
    (path,) = write_counting_shards(tmp_path, sizes=(40,))
    write_shard(path, list(range(40)), version=7)
    with make_loader(loader_mod, make_h(tmp_path)) as loader:
        with pytest.raises(loader_mod.ShardFormatError, match="unsupported version 7"):
            loader.next_batch()
        with pytest.raises(loader_mod.ShardFormatError):  # asking again does not hang either
            loader.next_batch()
    assert threading.active_count() == baseline


def test_close_stops_a_blocked_producer(loader_mod, tmp_path):
    write_counting_shards(tmp_path)
    baseline = threading.active_count()
    loader = make_loader(loader_mod, make_h(tmp_path, train_prefetch_queue=1))
    assert threading.active_count() == baseline + 1
    loader.next_batch()  # the producer now fills its queue and blocks on put()
    start = time.perf_counter()
    loader.close()
    assert time.perf_counter() - start < 1.0
    assert threading.active_count() == baseline
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        loader.next_batch()


def test_close_leaves_a_stuck_producer_behind(loader_mod, monkeypatch, capsys):
    """A producer stuck inside its source (a stalled read) cannot see the stop: close() gives up after STOP_SECONDS
    with a warning naming the thread, instead of holding up the exit."""
    release = threading.Event()

    def stalled_source():
        yield (torch.zeros(1),)
        release.wait()  # the next read never returns until the test releases it
        yield (torch.ones(1),)

    monkeypatch.setattr(loader_mod.BackgroundIterator, "STOP_SECONDS", 0.3)
    producer = loader_mod.BackgroundIterator(stalled_source(), 1, torch.device("cpu"), "stuck-producer")
    assert next(producer)[0].item() == 0.0
    start = time.perf_counter()
    closer = threading.Thread(target=producer.close)  # so a close() that waits for the producer fails, not hangs
    closer.start()
    closer.join(timeout=3.0)
    try:
        assert not closer.is_alive() and time.perf_counter() - start >= 0.3
        assert producer.thread.is_alive()
    finally:
        release.set()
    assert "stuck-producer: still running" in capsys.readouterr().err
    producer.thread.join(timeout=5)
    assert not producer.thread.is_alive()


def test_context_manager_stops_producer_on_consumer_error(loader_mod, tmp_path):
    write_counting_shards(tmp_path)
    baseline = threading.active_count()
    with pytest.raises(KeyError):
        with make_loader(loader_mod, make_h(tmp_path)) as loader:
            loader.next_batch()
            raise KeyError("training step failed")
    assert threading.active_count() == baseline


@pytest.mark.parametrize("during", ["next_batch", "close"])
def test_a_stop_signal_at_any_point_of_the_feed_still_lets_close_end_the_producer(loader_mod, during):
    """CHECKPOINT_ON_SIGNAL=0: SIGTERM raises RunStopped wherever the main thread is. Delivered at each profiler event
    (call/return, of Python and C functions) of one next_batch() or close() in turn, the exception reaches the caller
    and the (next) close() still ends the producer at once: once, a queue.Queue's lock left held by an exception
    raised just after its acquire made that close() wait for ever (a CI run stopped by SIGTERM hung)."""
    def batches():
        for index in itertools.count():
            yield torch.full((2, SEQ_LEN), index), torch.full((2, SEQ_LEN), -index)

    previous = signal.signal(signal.SIGTERM, loader_mod.StopSignal())
    baseline, points = threading.active_count(), 0
    try:
        for point in itertools.count(1):
            feed = loader_mod.DeviceBatchFeed(loader_mod.BackgroundIterator(batches(), 2, torch.device("cpu"), "p"),
                                              torch.device("cpu"), False)
            feed.next_batch()
            events, fired, stopped = itertools.count(1), [], False

            def deliver_at_point(frame, event, arg):
                if not fired and next(events) == point:
                    fired.append(event)
                    signal.raise_signal(signal.SIGTERM)  # the handler runs here, in the main thread, and raises

            sys.setprofile(deliver_at_point)  # a profiler that raises is removed
            try:
                feed.next_batch() if during == "next_batch" else feed.close()
                fired.append("no more events")
            except loader_mod.RunStopped:
                stopped = True
            sys.setprofile(None)
            assert stopped == (fired[0] != "no more events"), (during, point)
            closer = threading.Thread(target=feed.close)  # a close() that waits for ever fails the test, not hangs
            closer.start()
            closer.join(timeout=5.0)
            assert not closer.is_alive() and not feed.source.thread.is_alive(), (during, point)
            if not stopped:
                break
            points += 1
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert points >= 10 and threading.active_count() == baseline


SUBPROCESS_SCRIPT = """
import importlib.util, sys
from types import SimpleNamespace
import torch
module_path, module_name, data_dir, mode, train_loader = sys.argv[1:6]
spec = importlib.util.spec_from_file_location(module_name, module_path)
module = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = module
spec.loader.exec_module(module)
h = SimpleNamespace(train_files=data_dir + "/fineweb_train_*.bin", train_batch_tokens=64, train_seq_len=4,
                    seed=0, train_prefetch=True, train_prefetch_queue=2, train_copy_stream=True,
                    train_loader=train_loader, train_shuffle_seed="rank")
dist_info = SimpleNamespace(rank=0, world_size=1, grad_accum_steps=8, device=torch.device("cpu"))
logger = SimpleNamespace(log=lambda message: None)
if mode == "interrupt":
    with module.make_train_loader(h, dist_info, logger) as loader:
        loader.next_batch()
        print("ready", flush=True)
        while True:
            loader.next_batch()
loader = module.make_train_loader(h, dist_info, logger)
for step in range(10 ** 9):
    loader.next_batch()
    if step == 5:
        break
if mode == "break_and_close":
    loader.close()
print("ready", flush=True)
"""


@pytest.mark.parametrize("mode, train_loader", [("break", "sequential"), ("break_and_close", "sequential"),
                                                ("interrupt", "sequential"), ("break", "shuffled"),
                                                ("interrupt", "shuffled")])
def test_process_exits_promptly(loader_mod, tmp_path, mode, train_loader):
    write_counting_shards(tmp_path / "data", sizes=SHARD_SIZES if train_loader == "sequential" else (37, 50))
    script = tmp_path / "consume.py"
    script.write_text(textwrap.dedent(SUBPROCESS_SCRIPT))
    process = subprocess.Popen(
        [sys.executable, str(script), loader_mod.__file__, loader_mod.__name__, str(tmp_path / "data"), mode,
         train_loader],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # not inherited SIG_IGN of a background job
    try:
        assert process.stdout.readline().strip() == "ready", process.stderr.read()
        start = time.perf_counter()
        if mode == "interrupt":
            process.send_signal(signal.SIGINT)
        process.wait(timeout=5)
        assert time.perf_counter() - start < 5
    finally:
        process.kill()
        process.wait()
    stderr = process.stderr.read()
    if mode == "interrupt":
        assert process.returncode != 0 and "KeyboardInterrupt" in stderr
    else:
        assert process.returncode == 0, stderr


# ---- rewind ----

def test_rebuilt_loader_restarts_the_stream(loader_mod, tmp_path):
    write_counting_shards(tmp_path, sizes=(37, 5, 50, 23, 40, 16))
    h = make_h(tmp_path, train_prefetch_queue=4)
    baseline = threading.active_count()
    with make_loader(loader_mod, h, 1, 2, 4) as uninterrupted:
        expected = collect(uninterrupted, 12)
    warmup = make_loader(loader_mod, h, 1, 2, 4)
    collect(warmup, 3)  # its producer has run further ahead; none of that may leak into the next loader
    warmup.close()
    assert threading.active_count() == baseline
    with make_loader(loader_mod, h, 1, 2, 4) as rebuilt:
        assert_same_batches(collect(rebuilt, 12), expected)


# ---- CPU behaviour and wait accounting ----

def test_cpu_loader_logs_once_and_reports_host_wait(loader_mod, tmp_path):
    write_counting_shards(tmp_path)
    logger = ListLogger()
    with make_loader(loader_mod, make_h(tmp_path), logger=logger) as loader:
        collect(loader, 5)
        waited = loader.wait_ms()
        assert waited > 0 and loader.event_pairs == []  # no CUDA events on the CPU: host time only
        assert loader.wait_ms() == waited  # a running total
    assert len(logger.messages) == 1
    assert "prefetch:1" in logger.messages[0] and "copy_stream:0" in logger.messages[0]
    assert "pinning and copy stream skipped" in logger.messages[0]


# ---- validation feeder ----

VAL_TOKENS = np.arange(1, 200, dtype=np.uint16)


def build_val_batch(spec):
    start, stop = spec
    window = VAL_TOKENS[start:stop + 1].astype(np.int64)
    return window[:-1].reshape(-1, SEQ_LEN), window[1:].reshape(-1, SEQ_LEN)


VAL_SPECS = [(start, start + 8) for start in range(0, 160, 8)] + [(160, 164)]


@pytest.mark.parametrize("prefetch, queue_depth", [(False, 1), (True, 1), (True, 2), (True, 5)])
def test_val_feeder_yields_the_plain_loop(loader_mod, tmp_path, prefetch, queue_depth):
    h = make_h(tmp_path, val_prefetch=prefetch, val_prefetch_queue=queue_depth)
    baseline = threading.active_count()
    with loader_mod.make_val_feeder(h, StandInDistInfo(), VAL_SPECS, build_val_batch) as feeder:
        batches = list(feeder)
    assert threading.active_count() == baseline
    assert len(batches) == len(VAL_SPECS)
    for ((x_cpu, y_cpu), (x, y)), spec in zip(batches, VAL_SPECS):
        x_expected, y_expected = (torch.from_numpy(part) for part in build_val_batch(spec))
        for tensor, expected in ((x, x_expected), (y, y_expected), (x_cpu, x_expected), (y_cpu, y_expected)):
            assert torch.equal(tensor, expected)


def test_val_feeder_stops_on_early_exit_and_on_errors(loader_mod, tmp_path):
    h = make_h(tmp_path, val_prefetch_queue=1)
    baseline = threading.active_count()
    with loader_mod.make_val_feeder(h, StandInDistInfo(), VAL_SPECS, build_val_batch) as feeder:
        for index, _ in enumerate(feeder):
            if index == 2:
                break
    assert threading.active_count() == baseline

    def failing_build(spec):
        if spec == VAL_SPECS[5]:
            raise OSError(f"val shard unreadable at {spec}")
        return build_val_batch(spec)

    seen = []
    with pytest.raises(OSError, match=r"val shard unreadable at \(40, 48\)"):
        with loader_mod.make_val_feeder(h, StandInDistInfo(), VAL_SPECS, failing_build) as feeder:
            seen.extend(index for index, _ in enumerate(feeder))
    assert seen == [0, 1, 2, 3]  # one batch ahead: spec 5 fails while batch 4 is handed out
    assert threading.active_count() == baseline


def test_val_feeder_with_no_specs(loader_mod, tmp_path):
    with loader_mod.make_val_feeder(make_h(tmp_path), StandInDistInfo(), [], build_val_batch) as feeder:
        assert list(feeder) == []
