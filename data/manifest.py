"""A dataset's identity: which tokenizer made its shards.

Every dataset directory the data tools write (build_shards.py, cached_challenge_fineweb.py) holds a
`manifest.json` in the challenge's shape: `datasets[0]` is that dataset and `tokenizers[]` holds the entry
named by `datasets[0].tokenizer_name`, with `sha256` (of the tokenizer's .model file bytes) and
`vocab_size`. A tokenizer whose bytes hash differently did not make these shards, and scoring them with it
gives a wrong bits-per-byte. Standard library only, so the trainer can mirror these few lines.
"""

import json
from pathlib import Path

MANIFEST_NAME = "manifest.json"


def expected_tokenizer_sha256(dataset_dir):
    """(sha256, detail): the sha256 of the .model file that made the shards in `dataset_dir` and a phrase
    naming where it was read; or (None, the reason it cannot be known)."""
    path = Path(dataset_dir) / MANIFEST_NAME
    if not path.is_file():
        return None, f"{path} does not exist"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        return None, f"{path} is unreadable ({error})"
    datasets = manifest.get("datasets") if isinstance(manifest, dict) else None
    if not isinstance(datasets, list) or not datasets or not isinstance(datasets[0], dict):
        return None, f"{path} has no datasets[0]"
    name = datasets[0].get("tokenizer_name")
    tokenizers = manifest.get("tokenizers")
    entries = [entry for entry in tokenizers if isinstance(entry, dict)] if isinstance(tokenizers, list) else []
    entry = next((entry for entry in entries if entry.get("name") == name), None)
    if entry is None:
        return None, f"{path}: no tokenizers[] entry named {name!r} (datasets[0].tokenizer_name)"
    sha256 = entry.get("sha256")
    if not isinstance(sha256, str) or len(sha256) != 64:
        return None, f"{path}: tokenizer {name!r} has no sha256"
    return sha256, f"tokenizer {name!r} of {path}"


def datasets_using_tokenizer(sha256: str, datasets_root) -> list:
    """The dataset directories directly under `datasets_root` whose manifest names this tokenizer sha256."""
    root = Path(datasets_root)
    if not root.is_dir():
        return []
    return [
        directory for directory in sorted(root.iterdir())
        if directory.is_dir() and expected_tokenizer_sha256(directory)[0] == sha256
    ]
