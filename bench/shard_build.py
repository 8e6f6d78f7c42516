#!/usr/bin/env python3
"""Benchmark data/build_shards.py: build shards from one corpus with 1..N encoding workers.

  tools/py bench/shard_build.py                                  # ../shared/corpus/wikipedia_en.jsonl.xz
  tools/py bench/shard_build.py --corpus my.jsonl.xz --tokenizer data/tokenizers/fineweb_1024_bpe.model
  tools/py bench/shard_build.py --workers 1,4,16 --repeat 3

Each run is a full build (read + decompress + parse + encode + write shards + manifest) into a temp dir,
timed end to end; the tokenizer is trained once beforehand (or given) and is not part of the timing.
Every run's shards must be byte-identical; the table says so. Needs numpy and sentencepiece only (no
tqdm: the progress bar is off).
"""

import argparse, hashlib, itertools, sys, tempfile, time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
if __name__ == "__main__":
    from data.environment import require_modules  # noqa: E402

    require_modules("shard_build", "bench/shard_build.py", ("numpy", "sentencepiece"))

from data.build_shards import BuildConfig, build_shards, default_workers  # noqa: E402
from data.corpus import CorpusReader, record_text  # noqa: E402
from data.shards import list_shards  # noqa: E402
from data.sp_tokenizer import save_tokenizer, train_tokenizer  # noqa: E402

DEFAULT_CORPUS = REPO_ROOT.parent / "shared" / "corpus" / "wikipedia_en.jsonl.xz"
FALLBACK_CORPUS = REPO_ROOT / "data" / "sample" / "tiny.jsonl.xz"


def worker_counts(maximum: int) -> list:
    counts, value = [], 1
    while value < maximum:
        counts.append(value)
        value *= 2
    return counts + [maximum]


def shard_digest(out_dir: Path) -> str:
    digest = hashlib.sha256()
    for split in ("val", "train"):
        for path in list_shards(out_dir, split):
            digest.update(path.name.encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def prepare_tokenizer(args, work_dir: Path) -> Path:
    if args.tokenizer is not None:
        return args.tokenizer
    path = work_dir / f"bench_{args.vocab_size}_bpe.model"
    started = time.perf_counter()
    documents = itertools.islice(CorpusReader([args.corpus]), args.tokenizer_train_docs)
    save_tokenizer(train_tokenizer((record_text(record) for record in documents), args.vocab_size), path)
    print(f"tokenizer: trained on the first {args.tokenizer_train_docs} documents in "
          f"{time.perf_counter() - started:.1f} s (not part of the timings)")
    return path


def run_once(args, tokenizer: Path, workers: int, out_dir: Path):
    config = BuildConfig(
        inputs=(args.corpus,),
        out_dir=out_dir,
        tokenizer_out=out_dir / "unused.model",
        tokenizer=tokenizer,
        vocab_size=args.vocab_size,
        val_docs=args.val_docs,
        shard_size=args.shard_size,
        workers=workers,
        progress=False,
    )
    started = time.perf_counter()
    manifest = build_shards(config, log=lambda message: None)
    seconds = time.perf_counter() - started
    return manifest["datasets"][0]["stats"], seconds


def main() -> int:
    parser = argparse.ArgumentParser(description="Benchmark shard building with 1..N encoding workers.")
    default_corpus = DEFAULT_CORPUS if DEFAULT_CORPUS.is_file() else FALLBACK_CORPUS
    parser.add_argument("--corpus", type=Path, default=default_corpus, help=f"input file (default {default_corpus})")
    parser.add_argument("--tokenizer", type=Path, default=None, help="existing .model (default: train one)")
    parser.add_argument("--tokenizer-train-docs", type=int, default=4000, help="docs to train the tokenizer on")
    parser.add_argument("--vocab-size", type=int, default=1024)
    parser.add_argument("--max-workers", type=int, default=default_workers(), help="N: runs 1, 2, 4, ..., N")
    parser.add_argument("--workers", default=None, help="explicit comma list of worker counts, e.g. 1,8,16")
    parser.add_argument("--repeat", type=int, default=1, help="runs per worker count; the best is reported")
    parser.add_argument("--val-docs", type=int, default=500)
    parser.add_argument("--shard-size", type=int, default=100_000_000)
    args = parser.parse_args()
    counts = [int(item) for item in args.workers.split(",")] if args.workers else worker_counts(args.max_workers)

    print(f"corpus: {args.corpus} ({args.corpus.stat().st_size:,} bytes); cpus available: {default_workers()}; "
          f"python {sys.version.split()[0]}")
    rows, digests = [], set()
    with tempfile.TemporaryDirectory(prefix="shard_bench_") as work:
        work_dir = Path(work)
        tokenizer = prepare_tokenizer(args, work_dir)
        for workers in counts:
            best = None
            for attempt in range(args.repeat):
                out_dir = work_dir / f"out_{workers}_{attempt}"
                stats, seconds = run_once(args, tokenizer, workers, out_dir)
                digests.add(shard_digest(out_dir))
                best = seconds if best is None else min(best, seconds)
            rows.append((workers, stats["docs_total"], stats["tokens_total"], best))

    baseline = rows[0][3]
    print(f"\n| workers | docs | tokens | seconds | tokens/s | speedup vs {rows[0][0]} |")
    print("|---:|---:|---:|---:|---:|---:|")
    for workers, docs, tokens, seconds in rows:
        print(f"| {workers} | {docs:,} | {tokens:,} | {seconds:.2f} | {tokens / seconds:,.0f} | "
              f"{baseline / seconds:.2f}x |")
    print(f"\nshards byte-identical across all runs: {'yes' if len(digests) == 1 else 'NO'}")
    return 0 if len(digests) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
