"""Shared fixtures for the data tests (all named data_*), imported by each tests/test_data_*.py module.
They live here rather than in a conftest.py so the data tests do not depend on a shared file. Values are
memoized per session: the test tokenizer is trained once. Also puts the repo root on sys.path so tests can
`from data.shards import ...`."""

import json
import lzma
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

DATA_SAMPLE_PATH = REPO_ROOT / "data" / "sample" / "tiny.jsonl.xz"
DATA_SLICE_DOCS = 400  # enough text for a full 1024-piece vocab, small enough to train in well under 1 s
_session_values = {}


def _memoized(name, build):
    if name not in _session_values:
        _session_values[name] = build()
    return _session_values[name]


def _read_sample_slice():
    """The first DATA_SLICE_DOCS document texts of the bundled sample, read without the code under test."""
    texts = []
    with lzma.open(DATA_SAMPLE_PATH, "rt", encoding="utf-8") as handle:
        for line in handle:
            texts.append(json.loads(line)["text"])
            if len(texts) == DATA_SLICE_DOCS:
                break
    return texts


@pytest.fixture(scope="session")
def data_sample_docs():
    return _memoized("docs", _read_sample_slice)


@pytest.fixture(scope="session")
def data_slice_jsonl(tmp_path_factory, data_sample_docs):
    """The sample slice as a plain JSONL file."""

    def write():
        path = tmp_path_factory.mktemp("data_slice") / "slice.jsonl"
        with open(path, "w", encoding="utf-8") as handle:
            for text in data_sample_docs:
                handle.write(json.dumps({"text": text}) + "\n")
        return path

    return _memoized("slice", write)


@pytest.fixture(scope="session")
def data_tokenizer(tmp_path_factory, data_sample_docs):
    """A SPEC-settings tokenizer (vocab 1024) trained once per session on the sample slice."""

    def train():
        from data.sp_tokenizer import save_tokenizer, train_tokenizer

        path = tmp_path_factory.mktemp("data_tokenizer") / "fineweb_1024_bpe.model"
        save_tokenizer(train_tokenizer(data_sample_docs, 1024), path)
        return path

    return _memoized("tokenizer", train)


@pytest.fixture(scope="session")
def data_tokenizer_8192(tmp_path_factory, data_sample_docs):
    """A SPEC-settings tokenizer with the 2026-04-09 record's vocab (8192), trained once on the sample slice."""

    def train():
        from data.sp_tokenizer import save_tokenizer, train_tokenizer

        path = tmp_path_factory.mktemp("data_tokenizer_8192") / "fineweb_8192_bpe.model"
        save_tokenizer(train_tokenizer(data_sample_docs, 8192), path)
        return path

    return _memoized("tokenizer_8192", train)


def data_isolated_repo(root: Path) -> Path:
    """A copy of the repository's data/ code (and a link to the bundled sample) under `root`, so a test can run
    the real command line, whose default paths are data/datasets/ and data/tokenizers/ beside the scripts,
    without touching the repository's own data folders. Returns the copy's root."""
    import shutil

    (root / "data" / "sample").mkdir(parents=True)
    for source in (REPO_ROOT / "data").glob("*.py"):
        shutil.copy(source, root / "data" / source.name)
    (root / "data" / "sample" / DATA_SAMPLE_PATH.name).symlink_to(DATA_SAMPLE_PATH)
    return root
