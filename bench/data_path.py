"""Can the loaders feed the record's rate, and do their device batches arrive intact? (How long a training step
waits for its batch: the data_wait column of `bench/step_time.py train`, e.g. with its pP_cC presets.) Two modes:

producer  (CPU or GPU) each loader's producer in tokens/s per rank against the record's need (98,304 tokens per rank
          per 83.4 ms step), for the record's batch as rank 0 of 8 and as the one rank of 1, on random-token shards;
          best of three windows, each crossing >= 2 shard loads. Rows: record-style (every rank concatenates the
          whole world_size*span chunk, then slices, as the record's loader), builder (the SPEC §3 batch builder alone,
          pinned on CUDA), loader p0/p1 (make_train_loader with TRAIN_PREFETCH 0/1), and for TRAIN_LOADER=shuffled:
          its RNG plan alone, its builder, "shuffled xN" (the gather split over N threads: would such a split help?)
          and its loader; --cold: the shuffled rows again with the shards evicted from the page cache.
check     (CUDA, no model) for TRAIN_LOADER sequential and shuffled x TRAIN_PREFETCH 0/1 x TRAIN_COPY_STREAM 0/1 (as
          the rank of W=1 and as rank 3 of W=8) and VAL_PREFETCH 0/1 x VAL_COPY_STREAM 0/1: every device batch equals
          the CPU synchronous loader's bit for bit, read only after the compute stream was made to lag and the loop
          dropped its references (memory reused too early shows as wrong data); data_wait stats come back; no thread
          is left running. --negative-control: the copy-stream modes with Tensor.record_stream disabled, to show the
          check sees a missing record_stream. Exit 0 when every check passes.

  python3 bench/data_path.py producer [--cold] [--workers 2,4] [--shard-tokens 100000000 --shards 8]
  python3 bench/data_path.py check [--steps 48] [--negative-control]"""
import argparse, itertools, math, os, sys, tempfile, threading, time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, load_trainer, micro_batch_layout  # noqa: E402

RECORD_TOKENS_PER_SECOND = 98_304 / 0.0834
SEQ_LEN = 2048
QUIET = SimpleNamespace(log=lambda message, console=True: None)
# ==== shared by producer and check ====
def write_shards(directory: Path, sizes) -> None:
    """Random-token shards fineweb_train_<i>.bin of the given token counts (one of the right size is kept)."""
    rng = np.random.default_rng(0)
    for index, size in enumerate(sizes):
        path = directory / f"fineweb_train_{index:06d}.bin"
        if path.is_file() and path.stat().st_size == 1024 + 2 * size:
            continue
        header = np.zeros(256, dtype="<i4")
        header[:3] = (20240520, 1, size)
        path.write_bytes(header.tobytes() + rng.integers(0, 1024, size, dtype=np.uint16).astype("<u2").tobytes())


def loader_settings(directory: Path, **fields) -> SimpleNamespace:
    defaults = dict(train_files=str(directory / "fineweb_train_*.bin"), train_batch_tokens=786_432,
                    train_seq_len=SEQ_LEN, seed=1337, train_prefetch=True, train_prefetch_queue=2,
                    train_copy_stream=True, train_loader="sequential", train_shuffle_seed="rank", val_prefetch=True,
                    val_prefetch_queue=2, val_copy_stream=True)
    return SimpleNamespace(**{**defaults, **fields})


def rank_info(world_size: int, rank: int, device: torch.device) -> SimpleNamespace:
    return SimpleNamespace(rank=rank, world_size=world_size, local_rank=0, device=device,
                           grad_accum_steps=8 // world_size, is_main=rank == 0, distributed=world_size > 1)


def replace(h, **fields) -> SimpleNamespace:
    return SimpleNamespace(**{**vars(h), **fields})


# ==== producer ====
def record_style_batches(module, paths, layout):
    """The record's DistributedTokenLoader: take(world_size*span) as a torch.cat of pieces on every rank."""
    file_index, position = 0, 0
    tokens = torch.from_numpy(module.load_data_shard(paths[0]).astype(np.uint16, copy=False))
    shape = (layout.local_tokens // layout.seq_len, layout.seq_len)
    while True:
        pieces, needed = [], layout.world_size * layout.span
        while needed:
            if position == len(tokens):
                file_index = (file_index + 1) % len(paths)
                shard = module.load_data_shard(paths[file_index])
                tokens, position = torch.from_numpy(shard.astype(np.uint16, copy=False)), 0
                continue
            take = min(needed, len(tokens) - position)
            pieces.append(tokens[position:position + take])
            position += take
            needed -= take
        local = torch.cat(pieces)[layout.rank * layout.span:(layout.rank + 1) * layout.span].to(torch.int64)
        yield local[:-1].reshape(shape), local[1:].reshape(shape)


def split_gather_batches(sampler, rows: int, pin_memory: bool, workers: int):
    """The shuffled builder with the gather split over `workers` threads: this thread draws each plan (the only RNG
    user) and the threads fill fixed row ranges of the batch, so the data equal the one-thread builder's."""
    bounds = [rows * k // workers for k in range(workers + 1)]
    with ThreadPoolExecutor(workers) as pool:
        while True:
            plan = sampler.plan(rows)
            batch = torch.empty((2, rows, sampler.seq_len), dtype=torch.int64, pin_memory=pin_memory)
            out = batch.numpy()
            list(pool.map(lambda lo, hi: sampler.gather(plan[lo:hi], out[:, lo:hi]), bounds[:-1], bounds[1:]))
            yield batch[0], batch[1]


def evict_from_page_cache(paths) -> None:
    for path in paths:
        descriptor = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(descriptor)


def time_batches(next_batch, count: int, device: torch.device, before_window=None) -> float:
    """Best of 3 consecutive windows of `count` batches, after a first batch (first shard load, thread start)."""
    next_batch()
    best = math.inf
    for _ in range(3):
        if before_window is not None:
            before_window()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(count):
            next_batch()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def producer_rows(module, h, world_size: int, device: torch.device, shard_tokens: int, workers: list,
                  cold: bool) -> list:
    info = rank_info(world_size, 0, device)
    layout = micro_batch_layout(h, info)
    count = math.ceil(2.5 * shard_tokens / (world_size * layout.span))
    paths = module.list_shards(h.train_files, "train")
    pin_memory, seq_rows, rows = device.type == "cuda", layout.local_tokens // layout.seq_len, []

    def record(mode, next_batch, shuffled=False, before_window=None):
        seconds = time_batches(next_batch, count, device, before_window)
        loads = "-" if shuffled else f"{world_size * layout.span * count / shard_tokens:.1f}"
        rows.append((f"W={world_size} rank 0", mode, count, loads, seconds, layout.local_tokens * count / seconds))

    def sampler():  # a fresh one per mode: every mode reads the same sequences
        return module.ShuffledSequences(paths[0::world_size], layout.seq_len, 0)

    record("record-style", record_style_batches(module, paths, layout).__next__)
    record("builder", module.sequential_host_batches(paths, info, seq_rows, layout.seq_len, pin_memory).__next__)
    for prefetch in (False, True):
        with module.make_train_loader(replace(h, train_prefetch=prefetch), info, QUIET) as loader:
            record(f"loader p{int(prefetch)}", loader.next_batch)
    planner = sampler()
    record("shuffled plan", lambda: planner.plan(seq_rows), shuffled=True)
    for suffix in ("", " cold") if cold else ("",):
        evict = (lambda: evict_from_page_cache(paths)) if suffix else None
        record("shuffled builder" + suffix, module.shuffled_host_batches(sampler(), seq_rows, pin_memory).__next__,
               True, evict)
        for count_workers in workers:
            batches = split_gather_batches(sampler(), seq_rows, pin_memory, count_workers)
            record(f"shuffled x{count_workers}{suffix}", batches.__next__, True, evict)
            batches.close()
        for prefetch in (False, True):
            loader_h = replace(h, train_prefetch=prefetch, train_loader="shuffled")
            with module.make_train_loader(loader_h, info, QUIET) as loader:
                record(f"shuffled p{int(prefetch)}{suffix}", loader.next_batch, True, evict)
    return rows


def producer(args) -> int:
    workers = [int(part) for part in args.workers.split(",") if part.strip()]
    module = load_trainer(args.module)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    with tempfile.TemporaryDirectory() as temporary:
        directory = args.data_dir or Path(temporary)
        directory.mkdir(parents=True, exist_ok=True)
        write_shards(directory, [args.shard_tokens] * args.shards)
        h = loader_settings(directory)
        rows = [row for world_size in (8, 1)
                for row in producer_rows(module, h, world_size, device, args.shard_tokens, workers, args.cold)]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; {args.shards} shards of {args.shard_tokens:,} tokens; "
          f"record need {RECORD_TOKENS_PER_SECOND / 1e6:.2f}M tokens/s per rank")
    print(f"{'config':<12} {'mode':<21} {'batches':>7} {'shard loads':>11} {'seconds':>8} "
          f"{'Mtokens/s/rank':>14} {'x need':>7}")
    for config, mode, count, loads, seconds, rate in rows:
        print(f"{config:<12} {mode:<21} {count:>7} {loads:>11} {seconds:>8.3f} {rate / 1e6:>14.1f} "
              f"{rate / RECORD_TOKENS_PER_SECOND:>7.0f}")
    return 0


# ==== check ====
LAG_CYCLES = 2_000_000  # about 1 ms of GPU spin per batch: the compute stream falls behind the host


def events_elapsed_ms(event_pairs) -> float:
    """Sum of elapsed_time over (before, after) CUDA event pairs; waits for them."""
    for _, after in event_pairs:
        after.synchronize()
    return sum(before.elapsed_time(after) for before, after in event_pairs)


def read_lagging(next_pair, steps: int) -> list:
    """Device clones of `steps` batches, each taken after a GPU spin; the loop keeps no other reference."""
    clones = []
    for _ in range(steps):
        x, y = next_pair()
        torch.cuda._sleep(LAG_CYCLES)
        clones.append((x.clone(), y.clone()))
    return clones


def count_mismatches(clones: list, expected: list) -> int:
    return sum(not (torch.equal(x.cpu(), x_ref) and torch.equal(y.cpu(), y_ref))
               for (x, y), (x_ref, y_ref) in zip(clones, expected))


def check_train(module, h, world_size: int, rank: int, steps: int, device: torch.device) -> list:
    with module.make_train_loader(replace(h, train_prefetch=False), rank_info(world_size, rank, torch.device("cpu")),
                                  QUIET) as loader:
        expected = [tuple(part.clone() for part in loader.next_batch()) for _ in range(steps)]
    rows = []
    for prefetch, copy_stream in itertools.product((False, True), repeat=2):
        threads = threading.active_count()
        with module.make_train_loader(replace(h, train_prefetch=prefetch, train_copy_stream=copy_stream),
                                      rank_info(world_size, rank, device), QUIET) as loader:
            clones = read_lagging(loader.next_batch, steps)
            host_ms, pairs = loader.take_wait_stats()
        rows.append((f"{h.train_loader} W={world_size} rank={rank} prefetch={int(prefetch)} "
                     f"copy_stream={int(copy_stream)}",
                     steps, count_mismatches(clones, expected), host_ms, pairs, threading.active_count() == threads))
    return rows


def check_val(module, h, steps: int, device: torch.device) -> list:
    rows_per_batch = 32
    tokens = np.random.default_rng(1).integers(0, 1024, steps * rows_per_batch * SEQ_LEN + 1).astype(np.int64)
    specs = [(i * rows_per_batch * SEQ_LEN, (i + 1) * rows_per_batch * SEQ_LEN) for i in range(steps)]

    def build(spec):
        start, stop = spec
        return tokens[start:stop].reshape(-1, SEQ_LEN), tokens[start + 1:stop + 1].reshape(-1, SEQ_LEN)

    expected = [tuple(torch.from_numpy(part) for part in build(spec)) for spec in specs]
    rows = []
    for prefetch, copy_stream in itertools.product((False, True), repeat=2):
        threads = threading.active_count()
        with module.make_val_feeder(replace(h, val_prefetch=prefetch, val_copy_stream=copy_stream),
                                    rank_info(1, 0, device), specs, build) as feeder:
            batches, host_copies = iter(feeder), []

            def next_pair():
                host, device_pair = next(batches)
                host_copies.append(host)
                return device_pair

            clones = read_lagging(next_pair, len(specs))
            host_ms, pairs = feeder.take_wait_stats()
        mismatches = count_mismatches(clones, expected) + count_mismatches(host_copies, expected)
        rows.append((f"val prefetch={int(prefetch)} copy_stream={int(copy_stream)}", len(specs), mismatches,
                     host_ms, pairs, threading.active_count() == threads))
    return rows


def check(args) -> int:
    if not torch.cuda.is_available():
        sys.exit("data_path.py check needs a CUDA device")
    module = load_trainer(args.module)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    print(f"device: {torch.cuda.get_device_name(device)}; torch {torch.__version__}; module {args.module}")
    with tempfile.TemporaryDirectory() as temporary:
        # eight shards of odd sizes (one per rank of W=8 for the shuffled loader): the spans cross shard boundaries
        write_shards(Path(temporary), (1_500_007, 999_983, 2_000_003, 1_200_011, 800_011, 1_700_021, 650_021,
                                       1_100_009))
        h = loader_settings(Path(temporary))
        rows = [row for loader in ("sequential", "shuffled") for world_size, rank in ((1, 0), (8, 3))
                for row in check_train(module, replace(h, train_loader=loader), world_size, rank, args.steps, device)]
        rows += check_val(module, h, args.steps, device)
        print(f"{'check':<50} {'batches':>7} {'mismatched':>10} {'host_wait_ms':>12} {'device_wait_ms':>14} "
              f"{'event_pairs':>11} {'threads_ok':>10}")
        passed = True
        for name, batches, mismatches, host_ms, pairs, threads_ok in rows:
            device_ms = events_elapsed_ms(pairs)
            ok = mismatches == 0 and len(pairs) == batches and math.isfinite(device_ms) and threads_ok
            passed &= ok
            print(f"{name:<50} {batches:>7} {mismatches:>10} {host_ms:>12.2f} {device_ms:>14.2f} {len(pairs):>11} "
                  f"{str(threads_ok):>10}{'' if ok else '  FAIL'}")
        if args.negative_control:
            original = torch.Tensor.record_stream
            torch.Tensor.record_stream = lambda tensor, stream: None
            try:
                control = [row for row in check_train(module, h, 1, 0, args.steps, device) if "copy_stream=1" in row[0]]
            finally:
                torch.Tensor.record_stream = original
            for name, batches, mismatches, *_ in control:
                print(f"negative control (record_stream disabled) {name}: {mismatches}/{batches} batches corrupted")
    print("data_path check: PASS" if passed else "data_path check: FAIL")
    return 0 if passed else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)
    rate = modes.add_parser("producer", help="each loader's tokens/s per rank against the record's need")
    rate.add_argument("--data-dir", type=Path, help="where to write/reuse the shards (default: a temp dir)")
    rate.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard (record: 1e8)")
    rate.add_argument("--shards", type=int, default=8, help="shards (TRAIN_LOADER=shuffled needs one per rank: 8)")
    rate.add_argument("--workers", default="2,4", help="thread counts of the split-gather rows (empty: none)")
    rate.add_argument("--cold", action="store_true", help="also time the shuffled rows from a cold page cache")
    same = modes.add_parser("check", help="(CUDA) device batches bit-identical in every copy-stream mode")
    same.add_argument("--steps", type=int, default=48, help="batches per mode")
    same.add_argument("--negative-control", action="store_true", help="also run without record_stream")
    for sub in (rate, same):
        sub.add_argument("--module", type=Path, default=REPO / "train_gpt.py", help="file with the data section")
    args = parser.parse_args()
    return {"producer": producer, "check": check}[args.mode](args)


if __name__ == "__main__":
    sys.exit(main())
