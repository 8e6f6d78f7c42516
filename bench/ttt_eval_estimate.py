"""The phased LoRA TTT's loop time from a cost model, by simulating its schedule: for a val set (our shards' documents,
or the 2026-04-27 record's FineWeb val set as its logs describe it) and a world size, every queue batch's LoRA steps
(ceil(longest document / TTT_LORA_CHUNK) of them, step s at row length lora_context((s + 1) * chunk), on the rows
the trainer computes: the last from the first whose document goes on, a power of 2 >= 2 of them) cost the measured
milliseconds of a step at that length and row count (interpolated between the measured counts); rank r scores
queue batches r, r + W, ... (the trainer's static split); at each phase every rank waits for the last one to
arrive, then all run the phase's global-SGD chunks at the measured ms per rank-step. Prints the predicted loop time
and each rank's scoring seconds (--greedy: also with each batch given to the rank that is free first).

    python3 bench/ttt_eval_estimate.py --cost startup.json --val .carry/wiki_caseops --world 1,2,4
    python3 bench/ttt_eval_estimate.py --cost startup.json --record-logs ../shared/caseops/record_0427_seed*.log \\
        --world 8

--cost: the JSON of bench/ttt_startup_gpu.py (ms per LoRA step by row length at TTT_DOC_BATCH rows and, from the
version that times them, at 32, 8 and 2 rows; ms per SGD forward + backward by world size), measured on one GPU.
A file without the fewer-row timings models every step on all rows, as the trainer computed them before it
skipped the rows of finished documents. --val: the documents of DATA_PATH's val shards (as the trainer reads them)
and the phase boundaries scaled as bench/ttt_phased_gpu.py scales them (2,500 of 50,000 documents) unless --phases
is given. --record-logs: the record's batches (782 of 64 documents, the longest first) from the `ttp: bN/782 ...
dl:MIN-MAX` lines of its rank-0 logs (213 of the 782 in the three seed logs; the others' longest interpolated
between logged neighbours; lengths inside a batch in even steps of the logarithm), the record's boundaries
833/1,666/2,500 and its SGD chunks per phase (131/219/289 of 32,768 tokens, its `tttg` lines). What the model
leaves out: the all-reduce of the SGD gradients, the per-batch host work, and any compile inside the loop (the
warm-up compiles before it)."""
import argparse
import glob
import json
import math
import re
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_module import load_trainer  # noqa: E402

RECORD_BATCHES, RECORD_DOCS, RECORD_PHASES = 782, 50_000, (833, 1666, 2500)
RECORD_SGD_CHUNKS = (131, 219, 289)  # the seed logs' `tttg: cK/N` counts per phase


def record_batches(paths: list) -> list:
    """Per queue batch (queue order: longest first) its documents' lengths, ascending, from the record's logs: a
    logged batch's from its MIN to its MAX, another's from the batch below's longest to its own longest (interpolated
    between logged batches), in even steps of the logarithm."""
    logged = {}
    for path in paths:
        for match in re.finditer(r"ttp: b(\d+)/%d .*?dl:(\d+)-(\d+)" % RECORD_BATCHES, Path(path).read_text()):
            logged[int(match.group(1))] = (int(match.group(2)), int(match.group(3)))
    if len(logged) < 2:
        sys.exit(f"--record-logs {paths}: fewer than 2 `ttp: bN/{RECORD_BATCHES} ... dl:MIN-MAX` lines")
    known = sorted(logged)
    longest = np.exp(np.interp(np.arange(1, RECORD_BATCHES + 1), known, np.log([logged[b][1] for b in known])))
    docs = [64] * (RECORD_BATCHES - 1) + [RECORD_DOCS - 64 * (RECORD_BATCHES - 1)]  # the longest batch holds the rest
    batches = []
    for b in range(RECORD_BATCHES, 0, -1):
        low, high = logged[b] if b in logged else (longest[b - 2] if b > 1 else 1, longest[b - 1])
        batches.append(sorted(int(round(n)) for n in np.geomspace(max(low, 1), high, docs[b - 1])))
    return batches


def val_batches(tg, h) -> tuple:
    """Per queue batch of the val shards its documents' lengths (ascending), and each phase's SGD chunks at `h`'s
    boundaries."""
    tokens = np.concatenate([tg.load_data_shard(p) for p in sorted(glob.glob(h.val_files))])
    spans = tg.document_spans(torch.from_numpy(tokens.astype(np.int64)))
    lengths = spans[:, 1] - spans[:, 0]
    queue, order = tg.ttt_queue(spans, h.ttt_doc_batch)
    batches = [sorted(lengths[docs].tolist()) for docs in queue]
    boundaries = [int(part) for part in h.ttt_phase_docs.split(",") if part.strip()]
    counts, chunks = np.cumsum([docs.numel() for docs in queue]), []
    for boundary in boundaries:  # as gather_phase_documents: the scored documents in the record's order, the first
        scored = torch.cat(queue[:int(np.searchsorted(counts, boundary)) + 1])  # `boundary`; each with its final
        docs = order[torch.isin(order, scored)][:boundary]  # BOS, in chunks (the last one not trained)
        chunks.append(max(math.ceil(int((lengths[docs] + 1).sum() - 1) / h.ttt_chunk_tokens) - 1, 0))
    return batches, boundaries, chunks


def step_ms(cost: dict, rows: int):
    """ms of a LoRA step of `rows` rows at a row length: TTT_DOC_BATCH rows' measured cost ("lora_step_ms"), or
    interpolated in the number of rows between the measured counts ("lora_step_ms_rows_<n>"); without those, every
    step costs all rows (the trainer before it computed only the rows whose documents go on)."""
    full = {int(k): v for k, v in cost["lora_step_ms"].items()}
    measured = {cost["doc_batch"]: full} | {int(key.rsplit("_", 1)[1]): {int(k): v for k, v in table.items()}
                                           for key, table in cost.items() if key.startswith("lora_step_ms_rows_")}
    counts = sorted(measured)
    return lambda length: float(np.interp(rows, counts, [measured[n][length] for n in counts]))


def simulate(tg, h, batches, boundaries, sgd_chunks, cost, world, greedy=False) -> dict:
    sgd_ms = {int(k): v for k, v in cost["sgd_ms"].items()}
    if world not in sgd_ms:
        sys.exit(f"--cost: no SGD step time for world size {world} (measured: {sorted(sgd_ms)})")
    ctx, chunk, full = h.effective_eval_seq_len, h.ttt_lora_chunk, h.ttt_doc_batch
    compacted = any(key.startswith("lora_step_ms_rows_") for key in cost)
    costs = {rows: step_ms(cost, rows) for rows in range(1, full + 1)}

    def batch_seconds(lengths: list) -> float:  # ascending; the trainer's row count per step
        total = 0.0
        for s in range(math.ceil(lengths[-1] / chunk)):
            going_on = sum(1 for n in lengths if n > s * chunk)
            rows = min(full, max(2, 1 << (going_on - 1).bit_length())) if compacted else full
            total += costs[rows](tg.lora_context((s + 1) * chunk, ctx))
        return total / 1e3
    counts = np.cumsum([len(lengths) for lengths in batches])
    phases = [(int(np.searchsorted(counts, b)) + 1, k) for k, b in enumerate(boundaries) if b <= counts[-1]]
    phases = [(before, k) for before, k in phases if before < len(batches)]
    clock, busy, done = [0.0] * world, [0.0] * world, 0  # queue batches [0, done) are scored

    def run_until(limit: int) -> None:
        """Static: batch q is rank q mod W's (the trainer's). Greedy: each to the rank that is free first (what a
        shared work counter gives, as the record's file lock does)."""
        nonlocal done
        for q in range(done, min(limit, len(batches))):
            rank = clock.index(min(clock)) if greedy else q % world
            seconds = batch_seconds(batches[q])
            clock[rank] += seconds
            busy[rank] += seconds
        done = max(done, min(limit, len(batches)))
    sgd_total = 0.0
    for before, k in phases:
        run_until(before)
        sgd = sgd_chunks[k] * sgd_ms[world] / 1e3
        sgd_total += sgd
        clock = [max(clock) + sgd] * world
    run_until(len(batches))
    return dict(world=world, loop_s=max(clock), rank_busy_s=[round(b, 1) for b in busy], sgd_s=sgd_total,
                batches=len(batches), longest_batch_s=batch_seconds(batches[0]), total_gpu_s=sum(busy),
                compacted=compacted)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cost", required=True, help="bench/ttt_startup_gpu.py --json output")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--val", help="a DATA_PATH whose val shards give the documents")
    source.add_argument("--record-logs", nargs="+", help="the 2026-04-27 record's seed logs")
    parser.add_argument("--world", default="1,2,4,8", help="world sizes, comma-separated")
    parser.add_argument("--phases", help="TTT_PHASE_DOCS for --val (default: scaled from the record's)")
    parser.add_argument("--greedy", action="store_true", help="also the rows of a free-rank-first assignment")
    args = parser.parse_args()
    cost = json.loads(Path(args.cost).read_text())
    tg = load_trainer()
    env = {"RECIPE": "2026-04-27", "DATA_PATH": args.val or ".", "VOCAB_SIZE": "8192"}
    if args.val:
        h = tg.Hyperparameters.from_env(env)
        if args.phases is None:
            tokens = np.concatenate([tg.load_data_shard(p) for p in sorted(glob.glob(h.val_files))])
            docs = len(tg.document_spans(torch.from_numpy(tokens.astype(np.int64))))
            args.phases = ",".join(str(max(k + 1, round(docs * b / RECORD_DOCS))) for k, b in enumerate(RECORD_PHASES))
        h = tg.Hyperparameters.from_env(dict(env, TTT_PHASE_DOCS=args.phases))
        batches, boundaries, chunks = val_batches(tg, h)
        what = f"{args.val}'s val documents, phases at {args.phases} documents ({chunks} SGD chunks)"
    else:
        h = tg.Hyperparameters.from_env(env)
        batches, boundaries, chunks = record_batches(args.record_logs), list(RECORD_PHASES), list(RECORD_SGD_CHUNKS)
        what = "the record's val set (782 batches from its logs), phases at 833/1666/2500 documents"
    print(f"cost model: {cost['device']} ({cost['torch']}), LoRA ms by row length {cost['lora_step_ms']}, "
          f"SGD ms by world size {cost['sgd_ms']}\n{what}; longest document {batches[0][-1]:,} tokens; rows per step: "
          + ("the trainer's (the last from the first whose document goes on), costs interpolated between the measured "
             "row counts" if any(k.startswith("lora_step_ms_rows_") for k in cost) else
             "all (the cost file has no fewer-row timings; the trainer computed every row then)") + "\n")
    print("| world | batches to ranks | predicted loop s | longest batch s | SGD s | scoring GPU-s | "
          "per-rank scoring s |")
    print("|---|---|---:|---:|---:|---:|---|")
    for world in [int(w) for w in args.world.split(",") if w.strip()]:
        for greedy in (False, True) if args.greedy else (False,):
            row = simulate(tg, h, batches, boundaries, chunks, cost, world, greedy)
            print(f"| {world} | {'free rank first' if greedy else 'q mod W (ours)'} | {row['loop_s']:.1f} | "
                  f"{row['longest_batch_s']:.1f} | {row['sgd_s']:.1f} | {row['total_gpu_s']:.1f} | "
                  f"{row['rank_busy_s'] if world <= 8 else '...'} |")


if __name__ == "__main__":
    main()
