"""Under torchrun: every rank's training loader (with the env's TRAIN_PREFETCH / TRAIN_COPY_STREAM, prefetch on
by default) yields exactly its own slice of the SPEC §3 stream, and no two ranks read the same tokens.

Each rank pulls --steps optimizer steps of micro-batches from train_gpt.make_train_loader on its GPU and checks
them token for token against the train shards read directly: micro-step i of rank r must hold stream positions
[(i*W + r)*span, (i*W + r + 1)*span) (x = the first span-1 tokens, y = shifted by one). The ranges of all ranks
are gathered on rank 0, which checks they are pairwise disjoint and tile the stream with no gap.

  DATA_PATH=... torchrun --standalone --nproc_per_node=2 bench/rank_slices_check.py --steps 6
Exit status 0 when every check passes.
"""
import argparse
import glob
import os
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, load_trainer, micro_batch_layout  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    tg = load_trainer(args.module, needed=("make_train_loader", "load_data_shard"))
    environ = dict(os.environ)
    h = tg.Hyperparameters.from_env(environ)
    dist_info = tg.init_distributed(environ)
    h.validate_for_world(dist_info.world_size)
    logger = tg.Logger(dist_info, "/tmp/rank_slices_logs", h.run_id)  # a fresh uuid unless RUN_ID is set
    layout = micro_batch_layout(h, dist_info)
    micro_steps = args.steps * dist_info.grad_accum_steps
    needed = micro_steps * dist_info.world_size * layout.span
    stream, total = [], 0
    for path in sorted(glob.glob(h.train_files)):
        stream.append(tg.load_data_shard(path))
        total += len(stream[-1])
        if total >= needed:
            break
    stream = np.concatenate(stream)
    if len(stream) < needed:
        sys.exit("the train shards hold %d tokens; this check needs %d without wrap-around" % (len(stream), needed))
    ranges, failures = [], 0
    loader = tg.make_train_loader(h, dist_info, logger)
    try:
        for i in range(micro_steps):
            x, y = loader.next_batch()
            start = (i * dist_info.world_size + dist_info.rank) * layout.span
            expected = torch.from_numpy(stream[start:start + layout.span].astype(np.int64))
            ok = torch.equal(x.flatten().cpu(), expected[:-1]) and torch.equal(y.flatten().cpu(), expected[1:])
            failures += not ok
            ranges.append((start, start + layout.span))
    finally:
        loader.close()
    local = torch.tensor([failures] + [bound for pair in ranges for bound in pair], dtype=torch.int64,
                         device=dist_info.device)
    gathered = [torch.empty_like(local) for _ in range(dist_info.world_size)]
    if dist_info.distributed:
        dist.all_gather(gathered, local)
    else:
        gathered = [local]
    status = 0
    if dist_info.is_main:
        all_ranges = []
        for rank, row in enumerate(gathered):
            row = row.cpu().tolist()
            pairs = list(zip(row[1::2], row[2::2]))
            all_ranges += [(start, end, rank) for start, end in pairs]
            print("rank %d: %d micro-batches, %d mismatching the shard tokens; first ranges %s" % (
                rank, len(pairs), row[0], pairs[:3]))
            status |= row[0] != 0
        all_ranges.sort()
        overlaps = sum(1 for a, b in zip(all_ranges, all_ranges[1:]) if b[0] < a[1])
        gaps = sum(1 for a, b in zip(all_ranges, all_ranges[1:]) if b[0] > a[1])
        tokens = sum(end - start for start, end, _ in all_ranges)
        print("world_size %d, grad_accum %d, prefetch %d, copy_stream %d: %d spans, %d tokens, overlapping pairs %d,"
              " gaps %d, stream covered from 0 to %d" % (dist_info.world_size, dist_info.grad_accum_steps,
                                                          h.train_prefetch, h.train_copy_stream, len(all_ranges),
                                                          tokens, overlaps, gaps, all_ranges[-1][1]))
        status |= overlaps != 0 or gaps != 0 or all_ranges[0][0] != 0
        print("rank slices check: %s" % ("PASS" if status == 0 else "FAIL"))
    logger.close()
    if dist_info.distributed:
        dist.destroy_process_group()
    return int(status)


if __name__ == "__main__":
    sys.exit(main())
