"""GPU check of the data path's copy-stream logic (needs CUDA; no model involved).

For TRAIN_LOADER sequential and shuffled x TRAIN_PREFETCH 0/1 x TRAIN_COPY_STREAM 0/1 (the record's batch shape,
as the single rank of W=1 and as rank 3 of W=8 on one GPU) and for VAL_PREFETCH 0/1 x VAL_COPY_STREAM 0/1:
  - every device batch equals the CPU synchronous loader's (or the plain val loop's) bit for bit. Each batch is
    read on the compute stream only after the stream has been made to lag (torch.cuda._sleep) and after the
    loop has dropped its references, so device memory handed back for reuse too early would show as wrong data;
  - data_wait stats come back: host ms, and one CUDA event pair per batch, summed with events_elapsed_ms;
  - no thread is left running after close().
It then prints each train loader's producer throughput: its host batch builder alone in this thread, pinned, as
rank 0 of W=8, in tokens/s against the record's need (98,304 tokens per rank per 83.4 ms step).
--negative-control also runs the copy-stream train modes with Tensor.record_stream disabled and reports how many
batches then arrive corrupted: it shows whether this check can see a missing record_stream (informational).

python bench/gpu_loader_check.py [--module train_gpt.py] [--steps 48] [--negative-control]
Exit status 0 when every check passes.
"""
import argparse
import itertools
import math
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from harness import events_elapsed_ms, load_trainer, micro_batch_layout

NEEDED_NAMES = ("make_train_loader", "make_val_feeder", "sequential_host_batches", "shuffled_host_batches",
                "ShuffledSequences", "list_shards")
LAG_CYCLES = 2_000_000  # about 1 ms of GPU spin per batch: the compute stream falls behind the host
SEQ_LEN = 2048
RECORD_TOKENS_PER_SECOND = 98_304 / 0.0834


def write_shards(directory: Path) -> None:
    """Eight shards of odd sizes (one per rank of W=8 for the shuffled loader), so the sequential loader's spans
    cross shard boundaries and its stream wraps."""
    rng = np.random.default_rng(0)
    for index, size in enumerate((1_500_007, 999_983, 2_000_003, 1_200_011, 800_011, 1_700_021, 650_021, 1_100_009)):
        header = np.zeros(256, dtype="<i4")
        header[:3] = (20240520, 1, size)
        tokens = rng.integers(0, 1024, size, dtype=np.uint16).astype("<u2")
        (directory / f"fineweb_train_{index:06d}.bin").write_bytes(header.tobytes() + tokens.tobytes())


def make_h(directory: Path, **fields) -> SimpleNamespace:
    defaults = dict(train_files=str(directory / "fineweb_train_*.bin"), train_batch_tokens=786_432,
                    train_seq_len=SEQ_LEN, seed=1337, train_prefetch=True, train_prefetch_queue=2,
                    train_copy_stream=True, train_loader="sequential", train_shuffle_seed="rank",
                    val_prefetch=True, val_prefetch_queue=2,
                    val_copy_stream=True)
    return SimpleNamespace(**{**defaults, **fields})


def dist_info(world_size: int, rank: int, device: torch.device) -> SimpleNamespace:
    return SimpleNamespace(rank=rank, world_size=world_size, local_rank=0, device=device,
                           grad_accum_steps=8 // world_size, is_main=rank == 0, distributed=world_size > 1)


QUIET = SimpleNamespace(log=lambda message: None)


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
    cpu_h = SimpleNamespace(**{**vars(h), "train_prefetch": False})
    with module.make_train_loader(cpu_h, dist_info(world_size, rank, torch.device("cpu")), QUIET) as loader:
        expected = [tuple(part.clone() for part in loader.next_batch()) for _ in range(steps)]
    rows = []
    for prefetch, copy_stream in itertools.product((False, True), repeat=2):
        mode_h = SimpleNamespace(**{**vars(h), "train_prefetch": prefetch, "train_copy_stream": copy_stream})
        threads = threading.active_count()
        with module.make_train_loader(mode_h, dist_info(world_size, rank, device), QUIET) as loader:
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
        mode_h = SimpleNamespace(**{**vars(h), "val_prefetch": prefetch, "val_copy_stream": copy_stream})
        threads = threading.active_count()
        with module.make_val_feeder(mode_h, dist_info(1, 0, device), specs, build) as feeder:
            batches = iter(feeder)
            host_copies = []

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


def report(module, rows: list) -> bool:
    """Print the table; True when every row matched, has one event pair per batch and left no thread."""
    print(f"{'check':<50} {'batches':>7} {'mismatched':>10} {'host_wait_ms':>12} {'device_wait_ms':>14} "
          f"{'event_pairs':>11} {'threads_ok':>10}")
    passed = True
    for name, batches, mismatches, host_ms, pairs, threads_ok in rows:
        device_ms = events_elapsed_ms(pairs)
        ok = mismatches == 0 and len(pairs) == batches and math.isfinite(device_ms) and threads_ok
        passed &= ok
        print(f"{name:<50} {batches:>7} {mismatches:>10} {host_ms:>12.2f} {device_ms:>14.2f} {len(pairs):>11} "
              f"{str(threads_ok):>10}{'' if ok else '  FAIL'}")
    return passed


def producer_throughput(module, h, steps: int) -> None:
    """Tokens/s of each loader's host batch builder (pinned, in this thread) as rank 0 of W=8: best of 3 windows."""
    info = dist_info(8, 0, torch.device("cuda", 0))
    layout = micro_batch_layout(h, info)
    paths, rows = module.list_shards(h.train_files, "train"), layout.local_tokens // SEQ_LEN
    builders = {"sequential": lambda: module.sequential_host_batches(paths, info, rows, SEQ_LEN, True),
                "shuffled": lambda: module.shuffled_host_batches(
                    module.ShuffledSequences(paths[0::8], SEQ_LEN, 0), rows, True)}
    for name, build in builders.items():
        batches, best = build(), math.inf
        next(batches)
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(steps):
                next(batches)
            best = min(best, time.perf_counter() - start)
        rate = layout.local_tokens * steps / best
        print(f"producer {name}: {1000 * best / steps:.3f} ms per micro-batch, {rate / 1e6:.1f}M tokens/s per rank, "
              f"{rate / RECORD_TOKENS_PER_SECOND:.0f}x the record's need")


def negative_control(module, h, steps: int, device: torch.device) -> None:
    original = torch.Tensor.record_stream
    torch.Tensor.record_stream = lambda tensor, stream: None
    try:
        rows = [row for row in check_train(module, h, 1, 0, steps, device) if "copy_stream=1" in row[0]]
    finally:
        torch.Tensor.record_stream = original
    for name, batches, mismatches, *_ in rows:
        print(f"negative control (record_stream disabled) {name}: {mismatches}/{batches} batches corrupted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=Path("train_gpt.py"), help="file with the data section")
    parser.add_argument("--steps", type=int, default=48, help="batches per mode")
    parser.add_argument("--negative-control", action="store_true", help="also run without record_stream")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("gpu_loader_check needs a CUDA device")
    module = load_trainer(args.module, NEEDED_NAMES)
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    print(f"device: {torch.cuda.get_device_name(device)}; torch {torch.__version__}; module {args.module}")
    with tempfile.TemporaryDirectory() as temporary:
        write_shards(Path(temporary))
        h = make_h(Path(temporary))
        rows = [row for loader in ("sequential", "shuffled") for world_size, rank in ((1, 0), (8, 3))
                for row in check_train(module, SimpleNamespace(**{**vars(h), "train_loader": loader}), world_size,
                                       rank, args.steps, device)]
        passed = report(module, rows + check_val(module, h, args.steps, device))
        producer_throughput(module, h, args.steps)
        if args.negative_control:
            negative_control(module, h, args.steps, device)
    print("gpu_loader_check: PASS" if passed else "gpu_loader_check: FAIL")
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
