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
SHORT_VAL_DOCS = 8  # tiny_data_short_val's (tiny_data has 40)

# A model small enough for 2 CPU cores; every feature of the record is on (XSA, VE, bigram, smear, skips).
TINY_MODEL_ENV = {
    "NUM_LAYERS": "4", "MODEL_DIM": "64", "NUM_HEADS": "4", "NUM_KV_HEADS": "2", "XSA_LAST_N": "2",
    "VE_LAYERS": "2,3", "VE_DIM": "16", "BIGRAM_VOCAB_SIZE": "128", "BIGRAM_DIM": "16", "ROPE_DIMS": "8",
    "TRAIN_SEQ_LEN": "64", "EVAL_SEQ_LEN": "64", "TRAIN_BATCH_TOKENS": "4096", "VAL_BATCH_SIZE": "4096",
    "WARMUP_STEPS": "1", "MAX_WALLCLOCK_SECONDS": "0", "TORCH_COMPILE": "0",
}
# RECIPE=2026-04-09 scaled to 2 CPU cores: 6 blocks, blocks 2-3 looped (encoder [0, 1, 2, 3, 2], decoder
# [3, 2, 3, 4, 5]), parallel residuals from block 4, XSA everywhere; everything else is the recipe's.
TINY_0409_ENV = {
    "RECIPE": "2026-04-09", "NUM_LAYERS": "6", "MODEL_DIM": "64", "NUM_HEADS": "4", "NUM_KV_HEADS": "2",
    "XSA_LAST_N": "6", "ROPE_DIMS": "8", "LOOP_START": "2", "LOOP_END": "3", "PARALLEL_RESIDUAL_START": "4",
    "VOCAB_SIZE": "1024", "TRAIN_SEQ_LEN": "64", "EVAL_SEQ_LEN": "64", "TRAIN_BATCH_TOKENS": "4096",
    "VAL_BATCH_SIZE": "4096", "WARMUP_STEPS": "1", "MAX_WALLCLOCK_SECONDS": "0", "TORCH_COMPILE": "0",
}

# RECIPE=2026-04-27 scaled like TINY_0409_ENV: two lanes from block 4 (the last two decoder blocks, looped or not, each
# after a skip), the SmearGate and the sparse attention gate on their 12 leading dims.
TINY_0427_ENV = {
    "RECIPE": "2026-04-27", "NUM_LAYERS": "6", "MODEL_DIM": "64", "NUM_HEADS": "4", "NUM_KV_HEADS": "2",
    "XSA_LAST_N": "6", "ROPE_DIMS": "8", "LOOP_START": "2", "LOOP_END": "3", "PARALLEL_START_LAYER": "4",
    "VOCAB_SIZE": "1024", "TRAIN_SEQ_LEN": "64", "EVAL_SEQ_LEN": "64", "TRAIN_BATCH_TOKENS": "4096",
    "VAL_BATCH_SIZE": "4096", "WARMUP_STEPS": "1", "MAX_WALLCLOCK_SECONDS": "0", "TORCH_COMPILE": "0",
}


def require_triton() -> None:
    """Skips the calling test, saying why, when triton is not installed (./test.sh installs it into ./.venv), unless
    REQUIRE_TRITON_TESTS=1, which makes that a failure."""
    import importlib.util
    if importlib.util.find_spec("triton") is None:
        if os.environ.get("REQUIRE_TRITON_TESTS") == "1":
            pytest.fail("REQUIRE_TRITON_TESTS=1 but triton is not installed (./test.sh installs it into ./.venv)")
        pytest.skip("triton is not installed (pip install triton==3.7.1, or ./test.sh with ./.venv, runs this)")


def run_under_triton_interpreter(script: str) -> dict:
    """Runs tests/scripts/<script> in a child process with TRITON_INTERPRET=1 (it must be set before triton is
    imported) and returns the JSON object it prints last. Skips when triton is not installed, unless
    REQUIRE_TRITON_TESTS=1 (CI), which makes that a failure."""
    import subprocess
    require_triton()
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "scripts" / script)],
                          env=dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES=""),
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def compare_tiny_model_step(tg, configure_a, configure_b, seed: int = 0, env: dict = TINY_MODEL_ENV) -> dict:
    """One fp32 step of the tiny model (`env`, default TINY_MODEL_ENV) built twice from the same seed, each
    configured by its callable (e.g. the PyTorch path vs a Triton op), on the same tokens: both losses and the
    largest relative gradient difference. The output projections and down-projections are made non-zero first, so
    every path carries gradient."""
    import torch
    h = tg.Hyperparameters.from_env(dict(env))
    ids = torch.randint(0, h.vocab_size, (2, h.train_seq_len + 1), generator=torch.Generator().manual_seed(seed))
    outcomes = []
    for configure in (configure_a, configure_b):
        model = tg.build_model(h, torch.device("cpu"))
        configure(model)
        with torch.no_grad():
            model.qo_bank[h.num_layers:].normal_(0.0, 0.05, generator=torch.Generator().manual_seed(1))
            model.mlp_down_bank.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(2))
        loss = model(ids[:, :-1], ids[:, 1:])
        loss.backward()
        outcomes.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (loss_a, grads_a), (loss_b, grads_b) = outcomes
    return {
        "loss": [loss_a, loss_b], "grad_names": sorted(grads_a) == sorted(grads_b), "num_grads": len(grads_a),
        "max_grad_rel": max(((grads_b[n] - grads_a[n]).abs().max() / grads_a[n].abs().max()).item()
                            for n in grads_a if grads_a[n].abs().max() > 0),
        "grad_max": {n: g.abs().max().item() for n, g in grads_a.items()}}


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


@pytest.fixture(scope="session")
def tiny_data_short_val(tiny_data):
    """tiny_data (the same tokenizer and train shards) with only its first SHORT_VAL_DOCS val documents: for end-to-end
    runs whose assertions do not depend on the val set, each eval and TTT pass is 5x shorter."""
    import shutil
    dataset = tiny_data["root"] / "ds_short_val"
    dataset.mkdir()
    for name in ("fineweb_train_000000.bin", "fineweb_train_000001.bin"):
        shutil.copy(Path(tiny_data["env"]["DATA_PATH"]) / name, dataset / name)
    write_shard(dataset / "fineweb_val_000000.bin",
                [t for ids in tiny_data["sp"].encode(tiny_data["docs"][:SHORT_VAL_DOCS]) for t in [1] + ids])
    return dict(tiny_data, env=dict(tiny_data["env"], DATA_PATH=str(dataset)))


def run_env(extra: dict) -> dict:
    """A clean subprocess environment: no inherited settings of ours, no CUDA, single-threaded math."""
    env = {k: v for k, v in os.environ.items() if not k.isupper() or k in ("PATH", "HOME", "PYTHONPATH", "LANG")}
    env.update({"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    env.update(extra)
    return env
