#!/usr/bin/env python3
"""Turn text into the challenge's token shards (SPEC §2): a SentencePiece BPE tokenizer plus
`fineweb_val_*.bin` / `fineweb_train_*.bin` and a manifest.json.

  tools/py data/build_shards.py                # bundled Wikipedia sample -> trainer's default paths
  tools/py data/build_shards.py my.jsonl.xz more.txt.gz --val-docs 1000 --out-dir data/datasets/mine_sp1024
  tools/py data/build_shards.py corpus.jsonl --tokenizer data/tokenizers/fineweb_1024_bpe.model
  tools/py data/build_shards.py --caseops --vocab-size 8192   # sample -> the 2026-04-27 recipe's CaseOps paths

Validation is the first --val-docs documents (inputs read in the order given), the rest is train.
Every document is written as [BOS] + its tokens, no EOS. The same inputs and tokenizer give
byte-identical shards for any --workers. The dataset's manifest.json records its tokenizer's sha256; a
trained tokenizer goes beside its dataset's name (data/tokenizers/<out-dir name>.model, or the challenge's
fineweb_<V>_bpe.model for the default dir), and replacing another dataset's tokenizer file or shards needs
--overwrite. With --caseops the text goes through the lossless case transform first (data/caseops.py,
SPEC_0427 §2), a trained tokenizer gets its four operators as pieces, and the val shards get their byte
sidecars fineweb_val_bytes_*.bin (docs/caseops.md).
"""

import argparse
import hashlib
import itertools
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python3 data/build_shards.py`: import the `data` package from the repo root, and drop
    # data/ itself from the path so its datasets/ and tokenizers/ folders never shadow real packages.
    _SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _SCRIPT_DIR]
    sys.path.insert(0, os.path.dirname(_SCRIPT_DIR))
if __name__ == "__main__":
    from data.environment import require_modules

    require_modules("build_shards", "data/build_shards.py", ("numpy", "sentencepiece"))

import numpy as np

from data import caseops
from data.corpus import TEXT_UNITS, CorpusError, CorpusReader, record_text
from data.encoding import encode_batches
from data.fileio import atomic_write_bytes, sha256_file
from data.manifest import MANIFEST_NAME, datasets_using_tokenizer, expected_tokenizer_sha256
from data.shards import (
    MAX_TOKENS,
    MAX_VOCAB_SIZE,
    ShardFormatError,
    list_shards,
    list_sidecars,
    shard_name,
    sidecar_name,
    write_shard,
)
from data.sp_tokenizer import (
    TokenizerError,
    load_tokenizer,
    model_settings,
    save_tokenizer,
    settings_differences,
    tokenizer_from_bytes,
    tokenizer_vocab_size,
    train_tokenizer,
)

DATA_DIR = Path(__file__).resolve().parent
SAMPLE_PATH = DATA_DIR / "sample" / "tiny.jsonl.xz"
SAMPLE_VAL_DOCS = 200  # the sample has 4,000 documents: 200 val, 3,800 train
DEFAULT_VAL_DOCS = 50_000  # FineWeb challenge split
DEFAULT_VOCAB_SIZE = 1024
DEFAULT_SHARD_SIZE = 100_000_000
BATCH_BYTES = 1 << 20  # raw bytes of documents per encoding batch
MANIFEST_FORMAT_VERSION = 1


class BuildError(ValueError):
    """Invalid build settings, or input that leaves a split empty."""


def default_workers() -> int:
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


CASEOPS_SUFFIX = "_lossless_caps_caseops_v1_reserved"  # the 2026-04-27 record's names (SPEC_0427 §1)


def default_out_dir(vocab_size: int, caseops_on: bool = False) -> Path:
    return DATA_DIR / "datasets" / f"fineweb10B_sp{vocab_size}{CASEOPS_SUFFIX if caseops_on else ''}"


def default_tokenizer_path(vocab_size: int, caseops_on: bool = False) -> Path:
    return DATA_DIR / "tokenizers" / f"fineweb_{vocab_size}_bpe{CASEOPS_SUFFIX if caseops_on else ''}.model"


def tokenizer_path_for(out_dir: Path, vocab_size: int, caseops_on: bool = False) -> Path:
    """Where a trained tokenizer goes by default: the challenge's name for the challenge's dataset dir
    (fineweb10B_sp<V> -> fineweb_<V>_bpe.model, the trainer's default pair; with CaseOps the 2026-04-27
    record's pair), else data/tokenizers/<dataset name>.model, so a build into its own --out-dir never
    replaces the tokenizer of another dataset."""
    if Path(out_dir).resolve() == default_out_dir(vocab_size, caseops_on).resolve():
        return default_tokenizer_path(vocab_size, caseops_on)
    return DATA_DIR / "tokenizers" / f"{Path(out_dir).resolve().name}.model"


@dataclass(frozen=True)
class BuildConfig:
    inputs: tuple
    out_dir: Path
    tokenizer_out: Path  # where a trained tokenizer is written (unused when `tokenizer` is given)
    tokenizer: Path | None = None  # an existing .model to encode with; None trains one
    vocab_size: int = DEFAULT_VOCAB_SIZE
    val_docs: int = DEFAULT_VAL_DOCS
    shard_size: int = DEFAULT_SHARD_SIZE
    workers: int = 1
    text_field: str = "text"
    text_unit: str = "paragraph"
    tokenizer_train_docs: int | None = None  # None: train on every document
    progress: bool = False
    overwrite: bool = False  # replace a tokenizer file or shards that belong to another dataset
    caseops: bool = False  # lossless case transform before tokenizing, and val byte sidecars (SPEC_0427 §2)

    def validate(self) -> None:
        problems = []
        if not self.inputs:
            problems.append("no input files")
        if not 1 <= self.vocab_size <= MAX_VOCAB_SIZE:
            problems.append(f"vocab size {self.vocab_size} must be in [1, {MAX_VOCAB_SIZE}] (uint16 tokens)")
        if self.val_docs < 1:
            problems.append(f"val docs {self.val_docs} must be >= 1 (the trainer needs a validation split)")
        if not 1 <= self.shard_size <= MAX_TOKENS:
            problems.append(f"shard size {self.shard_size} must be in [1, {MAX_TOKENS}]")
        if self.workers < 1:
            problems.append(f"workers {self.workers} must be >= 1")
        if self.text_unit not in TEXT_UNITS:
            problems.append(f"text unit {self.text_unit!r} must be one of {TEXT_UNITS}")
        if self.tokenizer_train_docs is not None and self.tokenizer_train_docs < 1:
            problems.append(f"tokenizer train docs {self.tokenizer_train_docs} must be >= 1")
        if problems:
            raise BuildError("; ".join(problems))


@dataclass(frozen=True)
class Tokenizer:
    path: Path
    model_bytes: bytes
    bos_id: int
    trained: bool
    train_docs: int | None


class ShardWriter:
    """Packs token arrays into fixed-size shards. A shard is flushed when full, when the split changes
    (val -> train) and at the end; documents may straddle two shards of the same split. With val_sidecar,
    each val shard is written with its byte sidecar (same length, same boundaries)."""

    def __init__(self, directory: Path, shard_size: int, vocab_size: int, val_sidecar: bool = False):
        self.directory = Path(directory)
        self.vocab_size = vocab_size
        self.buffer = np.empty(shard_size, dtype=np.uint16)  # pages are only touched as they fill
        self.sidecar = np.empty(shard_size, dtype=np.uint16) if val_sidecar else None
        self.fill = 0
        self.split = None
        self.files = []  # (split, name, token count), in write order
        self.sidecar_files = []  # (name, entry count, byte total), in write order

    def add(self, split: str, tokens: np.ndarray, sidecar: np.ndarray | None = None) -> None:
        if split != self.split:
            self.flush()
            self.split = split
        if (sidecar is not None) != (self.sidecar is not None and split == "val"):
            raise BuildError(f"a {split} batch came {'with' if sidecar is not None else 'without'} a byte sidecar")
        offset = 0
        while offset < tokens.size:
            take = min(self.buffer.size - self.fill, tokens.size - offset)
            self.buffer[self.fill : self.fill + take] = tokens[offset : offset + take]
            if sidecar is not None:
                self.sidecar[self.fill : self.fill + take] = sidecar[offset : offset + take]
            self.fill += take
            offset += take
            if self.fill == self.buffer.size:
                self.flush()

    def flush(self) -> None:
        if self.fill == 0:
            return
        index = sum(1 for split, _, _ in self.files if split == self.split)
        name = shard_name(self.split, index)
        write_shard(self.directory / name, self.buffer[: self.fill], self.vocab_size)
        self.files.append((self.split, name, self.fill))
        if self.sidecar is not None and self.split == "val":
            counts = self.sidecar[: self.fill]
            write_shard(self.directory / sidecar_name(index), counts)  # byte counts, not ids: no vocab check
            self.sidecar_files.append((sidecar_name(index), self.fill, int(counts.sum(dtype=np.int64))))
        self.fill = 0


def document_batches(records, val_docs: int, doc_counts: dict):
    """Group records into (split, batch) of about BATCH_BYTES; a batch never crosses the val/train cut.
    Counts documents per split into `doc_counts` as they are read."""
    batch, batch_bytes, batch_split = [], 0, "val"
    for record in records:
        split = "val" if doc_counts["val"] < val_docs else "train"
        if split != batch_split and batch:
            yield batch_split, batch
            batch, batch_bytes = [], 0
        batch_split = split
        batch.append(record)
        batch_bytes += len(record.raw)
        doc_counts[split] += 1
        if batch_bytes >= BATCH_BYTES:
            yield batch_split, batch
            batch, batch_bytes = [], 0
    if batch:
        yield batch_split, batch


def prepare_tokenizer(config: BuildConfig, log) -> Tokenizer:
    """Load the given tokenizer, or train one on the inputs with the SPEC settings (kept in memory;
    it is written to `tokenizer_out` only when the whole build succeeds)."""
    if config.tokenizer is not None:
        processor, model_bytes = load_tokenizer(config.tokenizer, config.vocab_size)
        is_caseops = caseops.is_caseops_tokenizer(processor)
        if is_caseops and not config.caseops:
            raise BuildError(f"{config.tokenizer} is a CaseOps tokenizer (pieces U+E001-U+E004): add --caseops")
        if config.caseops and not is_caseops:
            raise BuildError(f"--caseops needs a CaseOps tokenizer, and {config.tokenizer} lacks the operator pieces "
                             "U+E001-U+E004; leave out --tokenizer to train one")
        differences = settings_differences(model_settings(model_bytes), config.vocab_size)
        if differences:
            log(f"warning: {config.tokenizer} differs from the SPEC tokenizer settings: {', '.join(differences)}")
        return Tokenizer(Path(config.tokenizer), model_bytes, processor.bos_id(), False, None)

    reader = CorpusReader(config.inputs, config.text_unit)
    documents = itertools.islice(reader, config.tokenizer_train_docs)
    seen, failures = [0], []

    def texts():
        try:
            for record in documents:
                seen[0] += 1
                text = record_text(record, config.text_field)
                yield caseops.encode(text) if config.caseops else text
        except CorpusError as error:  # SentencePiece would re-raise it as an opaque RuntimeError
            failures.append(error)
            raise

    scope = "all" if config.tokenizer_train_docs is None else f"the first {config.tokenizer_train_docs}"
    how = " (CaseOps text, its operators as pieces)" if config.caseops else ""
    log(f"training SentencePiece BPE (vocab {config.vocab_size}) on {scope} documents{how}")
    label = str(config.tokenizer_out)
    try:
        model_bytes = train_tokenizer(texts(), config.vocab_size, label, caseops.CONTROLS if config.caseops else "")
    except TokenizerError:
        if failures:
            raise failures[0] from None
        if seen[0] == 0:
            raise CorpusError(f"empty corpus: no documents in {', '.join(map(str, config.inputs))}") from None
        raise
    try:
        processor = tokenizer_from_bytes(model_bytes, config.vocab_size, label)
    except TokenizerError as error:
        raise TokenizerError(
            f"{error}: the training text ({seen[0]} documents) is too small for this vocab size; "
            "give more text or a smaller --vocab-size"
        ) from None
    return Tokenizer(Path(config.tokenizer_out), model_bytes, processor.bos_id(), True, seen[0])


def _tqdm_class():
    try:
        from tqdm import tqdm
    except ImportError:
        raise BuildError(
            "the progress bar needs tqdm, which this Python lacks: run in the quick start's environment "
            "(tools/py data/build_shards.py ...), pip install tqdm, or pass --no-progress"
        ) from None
    return tqdm


def _progress_bar(enabled: bool, total: int):
    if not enabled:
        return None
    tqdm = _tqdm_class()

    # disable=None: a bar on a terminal, nothing in logs. Progress counts on-disk (compressed) input bytes.
    return tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc="encoding", disable=None)


def encode_to_shards(config: BuildConfig, tokenizer: Tokenizer, staging: Path):
    """Stream every document through the encoders into shards under `staging`.
    Returns (writer, doc_counts, sources)."""
    reader = CorpusReader(config.inputs, config.text_unit)
    writer = ShardWriter(staging, config.shard_size, config.vocab_size, config.caseops)
    doc_counts = {"val": 0, "train": 0}
    batches = document_batches(reader, config.val_docs, doc_counts)
    bar = _progress_bar(config.progress, reader.total_bytes)
    try:
        encoded = encode_batches(batches, tokenizer.model_bytes, config.vocab_size, config.workers, config.text_field,
                                 config.caseops)
        for split, tokens, sidecar in encoded:
            writer.add(split, tokens, sidecar)
            if bar is not None:
                bar.update(reader.bytes_read - bar.n)
        writer.flush()
    finally:
        if bar is not None:
            bar.close()
    total_docs = doc_counts["val"] + doc_counts["train"]
    if total_docs == 0:
        raise CorpusError(f"empty corpus: no documents in {', '.join(map(str, config.inputs))}")
    if doc_counts["train"] == 0:
        raise BuildError(
            f"the inputs hold only {total_docs} documents and --val-docs {config.val_docs} takes them all; "
            "lower --val-docs so the train split is not empty"
        )
    return writer, doc_counts, reader.sources


def make_manifest(config: BuildConfig, tokenizer: Tokenizer, writer: ShardWriter, doc_counts: dict, sources) -> dict:
    """Challenge-shaped manifest (datasets[] / tokenizers[]) plus per-shard token counts and hashes.
    Paths are relative to the data root, two levels above the dataset dir, as in the challenge."""
    data_root = Path(config.out_dir).resolve().parent.parent
    tokens = {split: sum(count for s, _, count in writer.files if s == split) for split in ("val", "train")}
    files = {split: sum(1 for s, _, _ in writer.files if s == split) for split in ("val", "train")}
    shards = [
        {
            "name": name,
            "split": split,
            "tokens": count,
            "bytes": (config.out_dir / name).stat().st_size,
            "sha256": sha256_file(config.out_dir / name),
        }
        for split, name, count in writer.files
    ] + [
        {
            "name": name,
            "split": "val_bytes",
            "tokens": count,
            "bytes": (config.out_dir / name).stat().st_size,
            "sha256": sha256_file(config.out_dir / name),
        }
        for name, count, _ in writer.sidecar_files
    ]
    tokenizer_name = tokenizer.path.stem
    vocab_path = tokenizer.path.with_suffix(".vocab")
    tokenizer_entry = {
        "name": tokenizer_name,
        "kind": "sentencepiece_bpe",
        "vocab_size": config.vocab_size,
        "bos_id": tokenizer.bos_id,
        "model_path": os.path.relpath(tokenizer.path.resolve(), data_root),
        "sha256": hashlib.sha256(tokenizer.model_bytes).hexdigest(),
        "trained_by_this_build": tokenizer.trained,
        "train_docs": tokenizer.train_docs,
        "settings": model_settings(tokenizer.model_bytes),
    }
    if vocab_path.is_file():
        tokenizer_entry["vocab_path"] = os.path.relpath(vocab_path.resolve(), data_root)
    stats = {
        "docs_total": doc_counts["val"] + doc_counts["train"],
        "docs_val": doc_counts["val"],
        "docs_train": doc_counts["train"],
        "files_total": files["val"] + files["train"],
        "files_val": files["val"],
        "files_train": files["train"],
        "tokens_total": tokens["val"] + tokens["train"],
        "tokens_val": tokens["val"],
        "tokens_train": tokens["train"],
    }
    if config.caseops:  # the trainer checks the sidecars against this total
        stats["bytes_val"] = sum(total for _, _, total in writer.sidecar_files)
    dataset_entry = {
        "name": Path(config.out_dir).name,
        "tokenizer_name": tokenizer_name,
        "stats": stats,
        "val_docs": config.val_docs,
        "shard_size": config.shard_size,
        "bos_id": tokenizer.bos_id,
        "append_eos": False,
        "text_field": config.text_field,
        "text_unit": config.text_unit,
        "shards": shards,
        "sources": [vars(source) for source in sources],
    }
    if config.caseops:
        dataset_entry["text_transform"] = caseops.TRANSFORM_NAME
    return {
        "format_version": MANIFEST_FORMAT_VERSION,
        "created_by": "data/build_shards.py",
        "datasets": [dataset_entry],
        "tokenizers": [tokenizer_entry],
    }


def _shards_in(directory: Path) -> list:
    return list_shards(directory, "val") + list_shards(directory, "train")


def check_out_dir_before_work(config: BuildConfig) -> None:
    """Refuse, before any work, to replace shards whose tokenizer cannot be known (no usable manifest)."""
    shards = _shards_in(config.out_dir)
    if config.overwrite or not shards:
        return
    expected, reason = expected_tokenizer_sha256(config.out_dir)
    if expected is None:
        raise BuildError(
            f"{config.out_dir} already holds {len(shards)} shard(s) made with an unknown tokenizer ({reason}); "
            "choose another --out-dir, or pass --overwrite to replace them"
        )


def check_replacements(config: BuildConfig, tokenizer: Tokenizer, log) -> None:
    """Once the tokenizer's bytes are known: refuse (without --overwrite) to write over a tokenizer file with
    other bytes, or over shards that another tokenizer made; either would pair shards with the wrong
    tokenizer, and the trainer would score them with it."""
    new_sha256 = hashlib.sha256(tokenizer.model_bytes).hexdigest()
    if tokenizer.trained and tokenizer.path.is_file():
        old_sha256 = sha256_file(tokenizer.path)
        if old_sha256 != new_sha256:
            roots = {DATA_DIR / "datasets", Path(config.out_dir).resolve().parent}
            owners = sorted({str(d) for root in roots for d in datasets_using_tokenizer(old_sha256, root)})
            owner = f", the tokenizer of {', '.join(owners)}" if owners else ""
            if not config.overwrite:
                raise BuildError(
                    f"{tokenizer.path} already exists with other bytes (sha256 {old_sha256[:12]}...{owner}) than "
                    f"this build's tokenizer (sha256 {new_sha256[:12]}...); write it elsewhere with --tokenizer-out "
                    "or a dataset --out-dir of its own, or pass --overwrite to replace it"
                )
            log(f"warning: --overwrite: replacing {tokenizer.path} (sha256 {old_sha256[:12]}...{owner}); "
                "a dataset made with the old tokenizer no longer matches it")
    shards = _shards_in(config.out_dir)
    expected, detail = expected_tokenizer_sha256(config.out_dir)
    if not shards or expected == new_sha256:
        return
    if expected is None:
        made_with = f"an unknown tokenizer ({detail})"
    else:
        made_with = f"another tokenizer ({detail}, sha256 {expected[:12]}...; this build's is {new_sha256[:12]}...)"
    if not config.overwrite:
        raise BuildError(
            f"{config.out_dir} holds a dataset made with {made_with}; choose another --out-dir, "
            "or pass --overwrite to replace it"
        )
    log(f"warning: --overwrite: replacing the {len(shards)} shard(s) in {config.out_dir}, made with {made_with}")


def publish(staging: Path, out_dir: Path, writer: ShardWriter) -> None:
    """Replace the output dir's shards with the staged ones; the manifest is written after this."""
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    for stale in _shards_in(out_dir) + list_sidecars(out_dir):
        stale.unlink()
    for name in [name for _, name, _ in writer.files] + [name for name, _, _ in writer.sidecar_files]:
        os.replace(staging / name, out_dir / name)


def build_shards(config: BuildConfig, log=print) -> dict:
    """Tokenizer (trained or given) + shards + manifest. Shards are staged in a temp dir; the output dir
    and a trained tokenizer's files change only once every document has been encoded."""
    config.validate()
    if config.progress:
        _tqdm_class()  # fail before any work if the bar cannot be shown
    out_dir = Path(config.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    check_out_dir_before_work(config)
    tokenizer = prepare_tokenizer(config, log)
    check_replacements(config, tokenizer, log)
    staging = out_dir / f".build-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        writer, doc_counts, sources = encode_to_shards(config, tokenizer, staging)
        publish(staging, out_dir, writer)
        if tokenizer.trained:
            save_tokenizer(tokenizer.model_bytes, tokenizer.path)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    manifest = make_manifest(config, tokenizer, writer, doc_counts, sources)
    payload = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    atomic_write_bytes(out_dir / MANIFEST_NAME, payload.encode("utf-8"))
    return manifest


def summary_lines(config: BuildConfig, manifest: dict, seconds: float) -> list:
    dataset, tokenizer = manifest["datasets"][0], manifest["tokenizers"][0]
    stats = dataset["stats"]
    how = f"trained on {tokenizer['train_docs']} docs" if tokenizer["trained_by_this_build"] else "given"
    model_path = Path(config.tokenizer_out if tokenizer["trained_by_this_build"] else config.tokenizer).resolve()
    out_dir = Path(config.out_dir).resolve()
    rate = stats["tokens_total"] / max(seconds, 1e-9)
    lines = [
        f"done in {seconds:.1f} s ({rate:,.0f} tokens/s overall, {config.workers} workers)",
        f"  tokenizer  {model_path} ({how}; vocab {config.vocab_size}; sha256 {tokenizer['sha256'][:16]}...)",
    ]
    for split in ("val", "train"):
        lines.append(
            f"  {split:<5}      {stats['docs_' + split]:,} docs, {stats['tokens_' + split]:,} tokens, "
            f"{stats['files_' + split]} shard(s)"
        )
    if "bytes_val" in stats:
        lines.append(f"  caseops    {stats['files_val']} val byte sidecar(s): {stats['bytes_val']:,} bytes, the val "
                     "documents' UTF-8 bytes (manifest stats.bytes_val)")
    lines += [
        f"  output     {out_dir} (manifest.json: the dataset and its tokenizer's sha256)",
        f"  train with DATA_PATH={out_dir} TOKENIZER_PATH={model_path} VOCAB_SIZE={config.vocab_size}",
    ]
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Build a SentencePiece tokenizer and token shards (SPEC §2 format) from text. "
        "With no inputs, uses the bundled Wikipedia sample (data/sample/tiny.jsonl.xz).",
    )
    parser.add_argument(
        "inputs", nargs="*", type=Path,
        help="JSONL (.jsonl/.json/.ndjson) or plain-text files, optionally .gz or .xz; read in this order",
    )
    parser.add_argument(
        "--sample", action="store_true",
        help=f"use the bundled sample {SAMPLE_PATH.relative_to(DATA_DIR.parent)} (the default with no inputs)",
    )
    parser.add_argument(
        "--tokenizer", type=Path, default=None,
        help="existing SentencePiece .model to encode with (default: train one on the inputs)",
    )
    parser.add_argument(
        "--tokenizer-out", type=Path, default=None,
        help="where to write a trained tokenizer (default: data/tokenizers/fineweb_<V>_bpe.model for the default "
        "--out-dir, else data/tokenizers/<--out-dir's name>.model)",
    )
    parser.add_argument("--vocab-size", type=int, default=None,
                        help=f"tokenizer vocab size (default: --tokenizer's, else {DEFAULT_VOCAB_SIZE})")
    parser.add_argument(
        "--val-docs", type=int, default=None,
        help=f"the first N documents form the validation split (default {DEFAULT_VAL_DOCS}; "
        f"{SAMPLE_VAL_DOCS} for the sample)",
    )
    parser.add_argument(
        "--shard-size", type=int, default=DEFAULT_SHARD_SIZE, help="tokens per shard (the last one is shorter)",
    )
    parser.add_argument(
        "--out-dir", type=Path, default=None,
        help="output dir for shards + manifest.json (default data/datasets/fineweb10B_sp<V>)",
    )
    parser.add_argument(
        "--workers", type=int, default=default_workers(), help="encoding processes (default: all cores)",
    )
    parser.add_argument("--text-field", default="text", help="JSONL field that holds the document text")
    parser.add_argument(
        "--text-unit", choices=TEXT_UNITS, default="paragraph",
        help="what one document is in a plain-text file: blank-line separated paragraph, line, or whole file",
    )
    parser.add_argument(
        "--tokenizer-train-docs", type=int, default=None,
        help="train the tokenizer on only the first N documents (default: all)",
    )
    parser.add_argument(
        "--caseops", action="store_true",
        help="lossless case transform before tokenizing (SPEC_0427 §2), val byte sidecars; default paths "
        "data/datasets/fineweb10B_sp<V>_lossless_caps_caseops_v1_reserved and its tokenizer",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--overwrite", action="store_true",
        help="allow replacing a tokenizer file with other bytes, or shards in --out-dir made by another tokenizer",
    )
    return parser


def config_from_args(args) -> BuildConfig:
    if args.sample and args.inputs:
        raise BuildError("--sample cannot be combined with input files")
    use_sample = args.sample or not args.inputs
    inputs = (SAMPLE_PATH,) if use_sample else tuple(args.inputs)
    if args.val_docs is not None:
        val_docs = args.val_docs
    else:
        val_docs = SAMPLE_VAL_DOCS if use_sample else DEFAULT_VAL_DOCS
    vocab_size = args.vocab_size
    if vocab_size is None:  # a given tokenizer says its own size; naming it twice only invites a mismatch
        vocab_size = tokenizer_vocab_size(args.tokenizer) if args.tokenizer else DEFAULT_VOCAB_SIZE
    out_dir = args.out_dir or default_out_dir(vocab_size, args.caseops)
    return BuildConfig(
        inputs=inputs,
        out_dir=out_dir,
        tokenizer_out=args.tokenizer_out or tokenizer_path_for(out_dir, vocab_size, args.caseops),
        tokenizer=args.tokenizer,
        vocab_size=vocab_size,
        val_docs=val_docs,
        shard_size=args.shard_size,
        workers=args.workers,
        text_field=args.text_field,
        text_unit=args.text_unit,
        tokenizer_train_docs=args.tokenizer_train_docs,
        progress=not args.no_progress,
        overwrite=args.overwrite,
        caseops=args.caseops,
    )


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    started = time.perf_counter()
    try:
        config = config_from_args(args)
        print(f"building shards from {', '.join(map(str, config.inputs))} -> {config.out_dir}", flush=True)
        manifest = build_shards(config, log=lambda message: print(message, flush=True))
    except (BuildError, CorpusError, TokenizerError, ShardFormatError, OSError) as error:
        message = " ".join(str(error).split())
        print(f"build_shards: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("build_shards: interrupted; the output dir was left unchanged", file=sys.stderr)
        return 130
    for line in summary_lines(config, manifest, time.perf_counter() - started):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
