#!/usr/bin/env python3
"""Write the manifest.json of a dataset folder that was made elsewhere, after checking it against its shards.

  tools/py data/write_manifest.py DATA_PATH --tokenizer TOKENIZER.model [--overwrite]

A folder of `fineweb_{val,train}_NNNNNN.bin` shards written by another exporter (the 2026-04-27 record's
`prepare_caseops_data.py` writes shards and byte sidecars, but no manifest) has nothing that says which tokenizer
made it or, for CaseOps data, what the sidecars total; the trainer needs both. This tool reads every shard and
sidecar and writes the manifest our data tools write (data/manifest.py), once these hold: every file has the shard
format (header, size); every token id is inside the tokenizer's vocabulary; each split's stream starts with the
tokenizer's BOS; a CaseOps tokenizer (its operators as pieces) comes with one byte sidecar per val shard and a plain
one with none; each sidecar has one entry per token of its val shard and 0 at every BOS (the sidecar rule). The
manifest then names the tokenizer's sha256, the text transform and the sidecars' total (`stats.bytes_val`).
An existing manifest.json is kept unless --overwrite.
"""

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

if __package__ in (None, ""):  # run as a script: import the `data` package from the repo root (as build_shards.py)
    _SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _SCRIPT_DIR]
    sys.path.insert(0, os.path.dirname(_SCRIPT_DIR))
if __name__ == "__main__":
    from data.environment import require_modules

    require_modules("write_manifest", "data/write_manifest.py", ("numpy", "sentencepiece"))

import numpy as np

from data import caseops
from data.fileio import atomic_write_bytes, sha256_file
from data.manifest import MANIFEST_NAME
from data.shards import ShardFormatError, check_token_range, list_shards, list_sidecars, read_shard, sidecar_name
from data.sp_tokenizer import TokenizerError, model_settings

MANIFEST_FORMAT_VERSION = 1  # the version data/build_shards.py writes


class ManifestError(ValueError):
    """The folder and the tokenizer do not make a dataset; the message names the file."""


def _shard_entry(path: Path, split: str, tokens: int) -> dict:
    return {"name": path.name, "split": split, "tokens": tokens, "bytes": path.stat().st_size,
            "sha256": sha256_file(path)}


def describe_dataset(data_path: Path, tokenizer_path: Path) -> dict:
    """The manifest of `data_path`'s shards made with `tokenizer_path`, after the checks in the module docstring."""
    import sentencepiece as spm

    data_path, tokenizer_path = Path(data_path), Path(tokenizer_path)
    if not tokenizer_path.is_file():
        raise TokenizerError(f"{tokenizer_path}: tokenizer model not found")
    model_bytes = tokenizer_path.read_bytes()
    try:
        processor = spm.SentencePieceProcessor(model_proto=model_bytes)
    except (RuntimeError, OSError) as error:
        raise TokenizerError(f"{tokenizer_path}: not a SentencePiece model ({error})") from None
    vocab_size, bos_id = processor.vocab_size(), processor.bos_id()
    is_caseops = caseops.is_caseops_tokenizer(processor)
    shards = {split: list_shards(data_path, split) for split in ("val", "train")}
    for split, paths in shards.items():
        if not paths:
            raise ManifestError(f"{data_path}: no fineweb_{split}_NNNNNN.bin shards")
    sidecars = list_sidecars(data_path)
    if sidecars and not is_caseops:
        raise ManifestError(f"{sidecars[0]} is a CaseOps byte sidecar, but {tokenizer_path} is not a CaseOps "
                            "tokenizer (no pieces U+E001-U+E004)")
    expected_sidecars = {sidecar_name(int(path.stem[-6:])) for path in shards["val"]}
    stray = sorted(path.name for path in sidecars if path.name not in expected_sidecars)
    if stray:
        raise ManifestError(f"{data_path / stray[0]}: a byte sidecar without its val shard")
    entries, stats, bytes_val = [], {}, 0
    for split, paths in shards.items():
        docs = tokens_total = 0
        for path in paths:
            tokens = read_shard(path)
            check_token_range(path, tokens, vocab_size)
            if path == paths[0] and (tokens.size == 0 or tokens[0] != bos_id):
                raise ManifestError(f"{path} does not start with BOS (id {bos_id} of {tokenizer_path}): not shards "
                                    "this tokenizer made (each document is [BOS] + its tokens)")
            docs += int(np.count_nonzero(tokens == bos_id))
            tokens_total += tokens.size
            entries.append(_shard_entry(path, split, int(tokens.size)))
            if split == "val" and is_caseops:
                bytes_val += _checked_sidecar(path, tokens, bos_id, tokenizer_path, entries)
        stats.update({f"docs_{split}": docs, f"files_{split}": len(paths), f"tokens_{split}": tokens_total})
    stats.update({f"{key}_total": stats[f"{key}_val"] + stats[f"{key}_train"] for key in ("docs", "files", "tokens")})
    data_root = data_path.resolve().parent.parent  # paths relative to the data root, as build_shards.py writes them
    dataset = {"name": data_path.resolve().name, "tokenizer_name": tokenizer_path.stem, "stats": stats,
               "bos_id": bos_id, "shards": entries, "created_from": "existing shards (data/write_manifest.py)"}
    if is_caseops:
        stats["bytes_val"] = bytes_val  # the trainer divides every bpb by these bytes and checks them at start-up
        dataset["text_transform"] = caseops.TRANSFORM_NAME
    tokenizer = {"name": tokenizer_path.stem, "kind": "sentencepiece_bpe", "vocab_size": vocab_size, "bos_id": bos_id,
                 "model_path": os.path.relpath(tokenizer_path.resolve(), data_root),
                 "sha256": hashlib.sha256(model_bytes).hexdigest(), "trained_by_this_build": False,
                 "settings": model_settings(model_bytes)}
    return {"format_version": MANIFEST_FORMAT_VERSION, "created_by": "data/write_manifest.py",
            "datasets": [dataset], "tokenizers": [tokenizer]}


def _checked_sidecar(shard: Path, tokens: np.ndarray, bos_id: int, tokenizer_path: Path, entries: list) -> int:
    """The byte total of `shard`'s sidecar, after checking it belongs to that shard; appends its manifest entry."""
    path = shard.with_name(sidecar_name(int(shard.stem[-6:])))
    if not path.is_file():
        raise ManifestError(f"{shard} has no byte sidecar {path.name}, which a CaseOps tokenizer ({tokenizer_path}) "
                            "needs: its bpb divides by the original text's bytes")
    counts = read_shard(path)
    if counts.size != tokens.size:
        raise ManifestError(f"{path} holds {counts.size} byte counts, but {shard} holds {tokens.size} tokens: one per "
                            "token expected")
    if np.any(counts[tokens == bos_id]):
        raise ManifestError(f"{path} counts bytes at BOS positions of {shard} (the sidecar rule gives BOS 0): not "
                            "this shard's sidecar")
    entries.append(_shard_entry(path, "val_bytes", int(counts.size)))
    return int(counts.sum(dtype=np.int64))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tools/py data/write_manifest.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("data_path", type=Path, help="the dataset folder (the trainer's DATA_PATH)")
    parser.add_argument("--tokenizer", type=Path, required=True,
                        help="the SentencePiece .model that made the shards (the trainer's TOKENIZER_PATH)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing manifest.json")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    target = args.data_path / MANIFEST_NAME
    try:
        if not args.data_path.is_dir():
            raise ManifestError(f"{args.data_path}: no such folder")
        if target.exists() and not args.overwrite:
            raise ManifestError(f"{target} already exists (pass --overwrite to replace it)")
        manifest = describe_dataset(args.data_path, args.tokenizer)
    except (ManifestError, TokenizerError, ShardFormatError, OSError) as error:
        print(f"write_manifest: error: {' '.join(str(error).split())}", file=sys.stderr)
        return 1
    atomic_write_bytes(target, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    dataset, tokenizer = manifest["datasets"][0], manifest["tokenizers"][0]
    stats = dataset["stats"]
    print(f"wrote {target}")
    print(f"  tokenizer  {args.tokenizer} (vocab {tokenizer['vocab_size']}; sha256 {tokenizer['sha256'][:16]}...)")
    for split in ("val", "train"):
        print(f"  {split:<5}      {stats['docs_' + split]:,} docs, {stats['tokens_' + split]:,} tokens, "
              f"{stats['files_' + split]} shard(s)")
    if "bytes_val" in stats:
        print(f"  caseops    {stats['files_val']} val byte sidecar(s): {stats['bytes_val']:,} bytes (stats.bytes_val)")
    print(f"  train with DATA_PATH={args.data_path} TOKENIZER_PATH={args.tokenizer} "
          f"VOCAB_SIZE={tokenizer['vocab_size']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
