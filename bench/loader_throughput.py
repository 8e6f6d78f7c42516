"""Training data-path throughput, in tokens per second per rank, against what the record consumes.

The record (8xH100) eats 98,304 tokens per rank per micro-step at 83.4 ms a step: 1.18M tokens/s per rank.
For the record's batch (TRAIN_BATCH_TOKENS 786432, TRAIN_SEQ_LEN 2048) as rank 0 of 8 and as the single rank of
1 (grad_accum 8), this times, after a first batch that loads the first shard:
  record-style  the record's loader: every rank concatenates the whole world_size*span chunk, then slices
  builder       this section's SPEC §3 batch builder alone, in the calling thread (pinned on CUDA)
  loader p0/p1  make_train_loader with TRAIN_PREFETCH 0/1 (on CUDA: H2D on the copy stream, synchronised
                at the end), consumed as fast as it produces
Each row is the best of three consecutive windows, each crossing at least two shard loads (every rank reads
whole shards). Shards are random tokens,
written to --data-dir (kept) or to a temporary folder (removed), and read from the page cache.

python bench/loader_throughput.py [--module train_gpt.py] [--data-dir DIR] [--shard-tokens N] [--shards K]
"""
import argparse
import math
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from trainer_module import load_trainer

RECORD_TOKENS_PER_SECOND = 98_304 / 0.0834
NEEDED_NAMES = ("load_data_shard", "make_train_loader", "micro_batch_layout", "sequential_host_batches",
                "list_shards")


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


def time_batches(next_batch, count: int, device: torch.device, repeats: int = 3) -> float:
    """Best of `repeats` consecutive windows of `count` batches (each window crosses >= 2 shard loads)."""
    next_batch()  # first shard load and thread start stay out of the timed windows
    best = math.inf
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        start = time.perf_counter()
        for _ in range(count):
            next_batch()
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        best = min(best, time.perf_counter() - start)
    return best


def run_config(module, h, world_size: int, device: torch.device, shard_tokens: int) -> list:
    dist_info = SimpleNamespace(rank=0, world_size=world_size, local_rank=0, device=device,
                                grad_accum_steps=8 // world_size)
    layout = module.micro_batch_layout(h, dist_info)
    count = math.ceil(2.5 * shard_tokens / (world_size * layout.span))
    paths = module.list_shards(h.train_files, "train")
    logger = SimpleNamespace(log=lambda message: None)
    rows = []

    def record(mode, next_batch):
        seconds = time_batches(next_batch, count, device)
        loads = f"{world_size * layout.span * count / shard_tokens:.1f}"
        rows.append((f"W={world_size} rank 0", mode, count, loads, seconds, layout.local_tokens * count / seconds))

    record("record-style", record_style_batches(module, paths, layout).__next__)
    record("builder", module.sequential_host_batches(paths, layout, device.type == "cuda").__next__)
    for mode, fields in (("loader p0", dict(train_prefetch=False)), ("loader p1", dict(train_prefetch=True))):
        with module.make_train_loader(SimpleNamespace(**{**vars(h), **fields}), dist_info, logger) as loader:
            record(mode, loader.next_batch)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=Path("train_gpt.py"), help="file with the data section")
    parser.add_argument("--data-dir", type=Path, help="where to write/reuse the shards (default: a temp dir)")
    parser.add_argument("--shard-tokens", type=int, default=100_000_000, help="tokens per shard (record: 1e8)")
    parser.add_argument("--shards", type=int, default=3, help="number of shards")
    args = parser.parse_args()
    module = load_trainer(args.module, NEEDED_NAMES)
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    with tempfile.TemporaryDirectory() as temporary:
        directory = args.data_dir or Path(temporary)
        directory.mkdir(parents=True, exist_ok=True)
        write_shards(directory, args.shard_tokens, args.shards)
        h = SimpleNamespace(train_files=str(directory / "fineweb_train_*.bin"), train_batch_tokens=786_432,
                            train_seq_len=2048, seed=1337, train_prefetch=True, train_prefetch_queue=2,
                            train_copy_stream=True)
        rows = run_config(module, h, 8, device, args.shard_tokens) + run_config(module, h, 1, device,
                                                                               args.shard_tokens)
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; {args.shards} shards of {args.shard_tokens:,} tokens; "
          f"record need {RECORD_TOKENS_PER_SECOND / 1e6:.2f}M tokens/s per rank")
    print(f"{'config':<12} {'mode':<13} {'batches':>7} {'shard loads':>11} {'seconds':>8} "
          f"{'Mtokens/s/rank':>14} {'x need':>7}")
    for config, mode, count, loads, seconds, rate in rows:
        print(f"{config:<12} {mode:<13} {count:>7} {loads:>11} {seconds:>8.3f} {rate / 1e6:>14.1f} "
              f"{rate / RECORD_TOKENS_PER_SECOND:>7.0f}")


if __name__ == "__main__":
    main()
