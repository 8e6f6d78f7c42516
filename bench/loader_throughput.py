"""Training data-path throughput, in tokens per second per rank, against what the record consumes.

The record (8xH100) eats 98,304 tokens per rank per micro-step at 83.4 ms a step: 1.18M tokens/s per rank.
For the record's batch (TRAIN_BATCH_TOKENS 786432, TRAIN_SEQ_LEN 2048) as rank 0 of 8 and as the single rank of
1 (grad_accum 8), this times, after a first batch that loads the first shard:
  record-style  the record's loader: every rank concatenates the whole world_size*span chunk, then slices
  builder       this section's SPEC §3 batch builder alone, in the calling thread (pinned on CUDA)
  loader p0/p1  make_train_loader with TRAIN_PREFETCH 0/1 (on CUDA: H2D on the copy stream, synchronised
                at the end), consumed as fast as it produces
  shuffled ...  the same for TRAIN_LOADER=shuffled (SPEC_0409 §3, 48 random sequences of 2049 tokens per
                micro-step): "shuffled builder" is its batch builder alone (plan + gather in one thread),
                "shuffled plan" the RNG plan alone (no reads), "shuffled xN" the builder with the gather split over
                N threads (this thread plans; not in the trainer: it measures whether such a split would help)
Each row is the best of three consecutive windows, each crossing at least two shard loads (every rank reads
whole shards). Shards are random tokens, written to --data-dir (kept) or to a temporary folder (removed). The
"warm" rows read from the page cache; --cold also times the shuffled rows with the shards evicted from it
(posix_fadvise DONTNEED before each window, so the random sequence reads go to the disk).

python bench/loader_throughput.py [--module train_gpt.py] [--data-dir DIR] [--shard-tokens N] [--shards K]
                                  [--workers 2,4,8] [--cold]
"""
import argparse
import math
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from harness import load_trainer, micro_batch_layout

RECORD_TOKENS_PER_SECOND = 98_304 / 0.0834
NEEDED_NAMES = ("load_data_shard", "make_train_loader", "sequential_host_batches",
                "list_shards", "ShuffledSequences", "shuffled_host_batches")


def write_shards(directory: Path, shard_tokens: int, count: int) -> None:
    rng = np.random.default_rng(0)
    for index in range(count):
        path = directory / f"fineweb_train_{index:06d}.bin"
        if path.is_file() and path.stat().st_size == 1024 + 2 * shard_tokens:
            continue
        header = np.zeros(256, dtype="<i4")
        header[:3] = (20240520, 1, shard_tokens)
        with open(path, "wb") as file:
            file.write(header.tobytes())
            rng.integers(0, 1024, shard_tokens, dtype=np.uint16).astype("<u2").tofile(file)


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
        chunk = torch.cat(pieces)
        local = chunk[layout.rank * layout.span:(layout.rank + 1) * layout.span].to(torch.int64)
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


def time_batches(next_batch, count: int, device: torch.device, repeats: int = 3, before_window=None) -> float:
    """Best of `repeats` consecutive windows of `count` batches (each window crosses >= 2 shard loads)."""
    next_batch()  # first shard load and thread start stay out of the timed windows
    best = math.inf
    for _ in range(repeats):
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


def run_config(module, h, world_size: int, device: torch.device, shard_tokens: int, workers: list,
               cold: bool) -> list:
    dist_info = SimpleNamespace(rank=0, world_size=world_size, local_rank=0, device=device,
                                grad_accum_steps=8 // world_size)
    layout = micro_batch_layout(h, dist_info)
    count = math.ceil(2.5 * shard_tokens / (world_size * layout.span))
    paths = module.list_shards(h.train_files, "train")
    logger = SimpleNamespace(log=lambda message: None)
    pin_memory, seq_rows = device.type == "cuda", layout.local_tokens // layout.seq_len
    rows = []

    def record(mode, next_batch, shuffled=False, before_window=None):
        seconds = time_batches(next_batch, count, device, before_window=before_window)
        loads = "-" if shuffled else f"{world_size * layout.span * count / shard_tokens:.1f}"
        rows.append((f"W={world_size} rank 0", mode, count, loads, seconds, layout.local_tokens * count / seconds))

    def sampler():  # a fresh one per mode: every mode reads the same sequences
        return module.ShuffledSequences(paths[0::world_size], layout.seq_len, 0)

    record("record-style", record_style_batches(module, paths, layout).__next__)
    record("builder", module.sequential_host_batches(paths, dist_info, seq_rows, layout.seq_len, pin_memory).__next__)
    for mode, fields in (("loader p0", dict(train_prefetch=False)), ("loader p1", dict(train_prefetch=True))):
        with module.make_train_loader(SimpleNamespace(**{**vars(h), **fields}), dist_info, logger) as loader:
            record(mode, loader.next_batch)
    planner = sampler()
    record("shuffled plan", lambda: planner.plan(seq_rows), shuffled=True)
    for temperature in ("warm", "cold") if cold else ("warm",):
        evict = (lambda: evict_from_page_cache(paths)) if temperature == "cold" else None
        suffix = "" if temperature == "warm" else " cold"
        batches = module.shuffled_host_batches(sampler(), seq_rows, pin_memory)
        record("shuffled builder" + suffix, batches.__next__, True, evict)
        for count_workers in workers:
            batches = split_gather_batches(sampler(), seq_rows, pin_memory, count_workers)
            record(f"shuffled x{count_workers}{suffix}", batches.__next__, True, evict)
            batches.close()
        for mode, prefetch in (("shuffled p0", False), ("shuffled p1", True)):
            loader_h = SimpleNamespace(**{**vars(h), "train_prefetch": prefetch, "train_loader": "shuffled"})
            with module.make_train_loader(loader_h, dist_info, logger) as loader:
                record(mode + suffix, loader.next_batch, True, evict)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=Path("train_gpt.py"), help="file with the data section")
    parser.add_argument("--data-dir", type=Path, help="where to write/reuse the shards (default: a temp dir)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard (record: 1e8)")
    parser.add_argument("--shards", type=int, default=8,
                        help="number of shards (TRAIN_LOADER=shuffled needs one per rank: at least 8)")
    parser.add_argument("--workers", default="2,4", help="thread counts of the split-gather rows (empty: none)")
    parser.add_argument("--cold", action="store_true", help="also time the shuffled rows from a cold page cache")
    args = parser.parse_args()
    workers = [int(part) for part in args.workers.split(",") if part.strip()]
    module = load_trainer(args.module, NEEDED_NAMES)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    with tempfile.TemporaryDirectory() as temporary:
        directory = args.data_dir or Path(temporary)
        directory.mkdir(parents=True, exist_ok=True)
        write_shards(directory, args.shard_tokens, args.shards)
        h = SimpleNamespace(train_files=str(directory / "fineweb_train_*.bin"), train_batch_tokens=786_432,
                            train_seq_len=2048, seed=1337, train_prefetch=True, train_prefetch_queue=2,
                            train_copy_stream=True, train_loader="sequential", train_shuffle_seed="rank")
        rows = [row for world_size in (8, 1)
                for row in run_config(module, h, world_size, device, args.shard_tokens, workers, args.cold)]
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; {args.shards} shards of {args.shard_tokens:,} tokens; "
          f"record need {RECORD_TOKENS_PER_SECOND / 1e6:.2f}M tokens/s per rank")
    print(f"{'config':<12} {'mode':<21} {'batches':>7} {'shard loads':>11} {'seconds':>8} "
          f"{'Mtokens/s/rank':>14} {'x need':>7}")
    for config, mode, count, loads, seconds, rate in rows:
        print(f"{config:<12} {mode:<21} {count:>7} {loads:>11} {seconds:>8.3f} {rate / 1e6:>14.1f} "
              f"{rate / RECORD_TOKENS_PER_SECOND:>7.0f}")


if __name__ == "__main__":
    main()
