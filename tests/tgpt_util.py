"""Trainer test helpers: train_gpt.py loaded as a module, and a tiny real-text dataset + tokenizer built once.
Test modules import the fixtures from here (conftest.py belongs to the data tests)."""
import importlib.util
import json
import lzma
import os
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "sample" / "tiny.jsonl.xz"

# A model small enough for 2 CPU cores; every feature of the record is on (XSA, VE, bigram, smear, skips).
TINY_MODEL_ENV = {
    "NUM_LAYERS": "4", "MODEL_DIM": "64", "NUM_HEADS": "4", "NUM_KV_HEADS": "2", "XSA_LAST_N": "2",
    "VE_LAYERS": "2,3", "VE_DIM": "16", "BIGRAM_VOCAB_SIZE": "128", "BIGRAM_DIM": "16", "ROPE_DIMS": "8",
    "TRAIN_SEQ_LEN": "64", "EVAL_SEQ_LEN": "64", "TRAIN_BATCH_TOKENS": "4096", "VAL_BATCH_SIZE": "4096",
    "WARMUP_STEPS": "1", "MAX_WALLCLOCK_SECONDS": "0", "TORCH_COMPILE": "0",
}


def load_train_gpt(name: str = "train_gpt"):
    """Import the single-file trainer the way STYLE.md prescribes (register in sys.modules before exec)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "train_gpt.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tgpt():
    return load_train_gpt()


def write_shard(path, tokens) -> None:
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as handle:
        handle.write(header.tobytes())
        handle.write(np.asarray(tokens, dtype="<u2").tobytes())


def sample_docs(count: int):
    docs = []
    with lzma.open(SAMPLE, "rt", encoding="utf-8") as handle:
        for line in handle:
            docs.append(json.loads(line)["text"])
            if len(docs) == count:
                break
    return docs


@pytest.fixture(scope="session")
def tiny_data(tmp_path_factory):
    """SentencePiece BPE (SPEC §2 settings, vocab 1024) trained on 400 sample docs; val = first 40 docs,
    train = the rest in two shards. Returns the env that points the trainer at it."""
    import sentencepiece as spm

    root = tmp_path_factory.mktemp("tiny_data")
    docs = sample_docs(400)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(d.replace("\0", " ").strip() for d in docs), model_prefix=str(root / "sp"),
        vocab_size=1024, model_type="bpe", character_coverage=0.999, byte_fallback=True, split_digits=True,
        normalization_rule_name="nmt_nfkc", add_dummy_prefix=False, pad_id=0, bos_id=1, eos_id=2, unk_id=3,
        hard_vocab_limit=False, minloglevel=2, num_threads=2)
    sp = spm.SentencePieceProcessor(model_file=str(root / "sp.model"))
    streams = [[1] + ids for ids in sp.encode(docs)]
    val = [t for ids in streams[:40] for t in ids]
    train = [t for ids in streams[40:] for t in ids]
    dataset = root / "ds"
    dataset.mkdir()
    write_shard(dataset / "fineweb_val_000000.bin", val)
    write_shard(dataset / "fineweb_train_000000.bin", train[: len(train) // 2])
    write_shard(dataset / "fineweb_train_000001.bin", train[len(train) // 2:])
    env = dict(TINY_MODEL_ENV, DATA_PATH=str(dataset), TOKENIZER_PATH=str(root / "sp.model"))
    return {"root": root, "env": env, "sp": sp, "docs": docs}


def run_env(extra: dict) -> dict:
    """A clean subprocess environment: no inherited settings of ours, no CUDA, single-threaded math."""
    env = {k: v for k, v in os.environ.items() if not k.isupper() or k in ("PATH", "HOME", "PYTHONPATH", "LANG")}
    env.update({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env
