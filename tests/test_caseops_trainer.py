"""The trainer on CaseOps data (SPEC_0427 §2): every bpb divides by the byte sidecar's counts of the scored
targets, which are the original text's UTF-8 bytes, and a sidecar that does not fit its shards, manifest or
tokenizer stops the run at start-up with an error naming both files."""
import glob
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import types
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import torch

from tgpt_util import REPO, TINY_MODEL_ENV, load_train_gpt, run_env, sample_docs, tgpt, write_shard  # noqa: F401

CPU = torch.device("cpu")
VAL_DOCS = 12


def invariant_documents(count: int) -> list:
    """Sample documents the tokenizer's normalization leaves alone (single spaces, NFKC-stable), so that the
    plain SentencePiece byte tables count their UTF-8 bytes too."""
    texts = (" ".join(text.split()) for text in sample_docs(count * 2))
    return [text for text in texts if unicodedata.normalize("NFKC", text) == text][:count]


def build(root, name: str, *flags) -> dict:
    command = [sys.executable, str(REPO / "data" / "build_shards.py"), str(root / "docs.jsonl"), "--vocab-size", "512",
               "--val-docs", str(VAL_DOCS), "--out-dir", str(root / name), "--tokenizer-out", str(root / f"{name}.model"),
               "--no-progress", "--workers", "1", *flags]
    out = subprocess.run(command, capture_output=True, text=True, timeout=600, env=run_env({}))
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    return {"DATA_PATH": str(root / name), "TOKENIZER_PATH": str(root / f"{name}.model"), "VOCAB_SIZE": "512"}


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    """The same documents as plain shards and as CaseOps shards (val in several 3,000-token shards + sidecars)."""
    root = tmp_path_factory.mktemp("caseops_trainer")
    docs = invariant_documents(200)
    (root / "docs.jsonl").write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    return {"plain": build(root, "plain"), "caseops": build(root, "caseops", "--caseops", "--shard-size", "3000"),
            "val_utf8_bytes": sum(len(d.encode("utf-8")) for d in docs[:VAL_DOCS]), "root": root}


def val_token_count(env: dict) -> int:
    return sum(int(np.fromfile(path, dtype="<i4", count=3)[2]) for path in glob.glob(
        env["DATA_PATH"] + "/fineweb_val_[0-9]*.bin"))


def whole_documents_h(tg, env: dict, **extra):
    """Validation cut to whole documents: the eval length is every target (val tokens - 1)."""
    values = dict(TINY_MODEL_ENV, **env, EVAL_SEQ_LEN=str(val_token_count(env) - 1), TTT_ENABLED="0")
    return tg.Hyperparameters.from_env({k: str(v) for k, v in dict(values, **extra).items()})


class Quiet:
    def log(self, message):
        pass


def load(tg, h):
    return tg.load_validation_data(h, tg.load_tokenizer(h, Quiet()), CPU)


def test_val_bytes_of_caseops_and_plain_shards_are_the_documents_utf8_bytes(tgpt, datasets):
    plain, caseops = (load(tgpt, whole_documents_h(tgpt, datasets[name])) for name in ("plain", "caseops"))
    assert caseops.num_targets != plain.num_targets  # other tokens, the same text
    assert int(caseops.target_bytes.sum()) == int(plain.target_bytes.sum()) == datasets["val_utf8_bytes"]
    sidecar = np.concatenate([np.fromfile(p, dtype="<u2", offset=1024) for p in sorted(
        (datasets["root"] / "caseops").glob("fineweb_val_bytes_*.bin"))])
    assert len(sorted((datasets["root"] / "caseops").glob("fineweb_val_bytes_*.bin"))) > 1
    assert caseops.target_bytes.tolist() == sidecar[1:].tolist()  # target j = token j + 1


def test_tiny_model_run_logs_val_bytes_and_divides_by_the_sidecar(datasets, tmp_path):
    env = dict(TINY_MODEL_ENV, **datasets["caseops"], ITERATIONS="2", VAL_LOSS_EVERY="0", FINAL_EVAL="0",
               TTT_ENABLED="0", RUN_ID="caseops", EVAL_SEQ_LEN=str(val_token_count(datasets["caseops"]) - 1))
    out = subprocess.run([sys.executable, str(REPO / "train_gpt.py")], cwd=tmp_path, env=run_env(env),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "val_bytes:%d\n" % datasets["val_utf8_bytes"] in out.stdout
    loss, bpb = map(float, re.search(r"step:2/2 val_loss:([\d.]+) val_bpb:([\d.]+)", out.stdout).groups())
    tg = load_train_gpt("train_gpt_caseops_check")
    val = load(tg, whole_documents_h(tg, datasets["caseops"]))
    scored = val.num_targets // 64 * 64  # the periodic eval's whole TRAIN_SEQ_LEN sequences
    expected = loss / math.log(2) * scored / int(val.target_bytes[:scored].sum())
    assert bpb == pytest.approx(expected, abs=2e-4)


# ---- bad input: named errors before training ----

@pytest.fixture
def copy_of(datasets, tmp_path):
    def copy(name: str) -> dict:
        shutil.copytree(datasets[name]["DATA_PATH"], tmp_path / name)
        return dict(datasets[name], DATA_PATH=str(tmp_path / name))
    return copy


def load_with(tg, env: dict, tokenizer_env: dict):
    """load_validation_data of env's shards with tokenizer_env's tokenizer (the sha256 check is not under test)."""
    import sentencepiece as spm
    h = whole_documents_h(tg, dict(env, TOKENIZER_PATH=tokenizer_env["TOKENIZER_PATH"]))
    return tg.load_validation_data(h, spm.SentencePieceProcessor(model_file=tokenizer_env["TOKENIZER_PATH"]), CPU)


def sidecar(env: dict, index: int = 1) -> str:
    return env["DATA_PATH"] + "/fineweb_val_bytes_%06d.bin" % index


def test_a_sidecar_of_another_length_names_both_files(tgpt, copy_of):
    env = copy_of("caseops")
    counts = np.fromfile(sidecar(env), dtype="<u2", offset=1024)
    write_shard(sidecar(env), counts[:-1])
    message = "%s holds %d byte counts, but %s holds %d tokens" % (
        sidecar(env), counts.size - 1, env["DATA_PATH"] + "/fineweb_val_000001.bin", counts.size)
    with pytest.raises(tgpt.DataError, match=re.escape(message)):
        load_with(tgpt, env, env)


def test_a_truncated_sidecar_is_a_named_error(tgpt, copy_of):
    env = copy_of("caseops")
    with open(sidecar(env), "r+b") as handle:
        handle.truncate(1024 + 100)
    with pytest.raises(tgpt.ShardFormatError, match=re.escape(sidecar(env) + ": size 1124 bytes")):
        load_with(tgpt, env, env)


def test_a_missing_sidecar_of_a_caseops_dataset_is_a_named_error(tgpt, copy_of):
    env = copy_of("caseops")
    os.remove(sidecar(env))
    with pytest.raises(tgpt.DataError, match=re.escape("fineweb_val_000001.bin has no byte sidecar " + sidecar(env))):
        load_with(tgpt, env, env)
    for index in range(8):
        Path(sidecar(env, index)).unlink(missing_ok=True)
    manifest = env["DATA_PATH"] + "/manifest.json"
    with pytest.raises(tgpt.DataError, match=re.escape(f"{manifest} says the shards are lossless_caps_caseops_v1, but")):
        load_with(tgpt, env, env)


def test_a_sidecar_total_other_than_the_manifests_names_both_files(tgpt, copy_of):
    env = copy_of("caseops")
    path = env["DATA_PATH"] + "/manifest.json"
    manifest = json.loads(open(path).read())
    manifest["datasets"][0]["stats"]["bytes_val"] += 1
    open(path, "w").write(json.dumps(manifest))
    with pytest.raises(tgpt.DataError, match=re.escape(f"{sidecar(env, 0)} (and the other byte sidecars) total ")
                       + ".*" + re.escape(f"but datasets[0].stats.bytes_val of {path} is")):
        load_with(tgpt, env, env)


def test_tokenizer_and_shards_of_different_kinds_are_named_errors(tgpt, datasets):
    plain, caseops = datasets["plain"], datasets["caseops"]
    with pytest.raises(tgpt.DataError, match=re.escape(f"TOKENIZER_PATH={caseops['TOKENIZER_PATH']} is a CaseOps "
                                                       "tokenizer") + ".*" + re.escape(plain["DATA_PATH"])):
        load_with(tgpt, plain, caseops)
    with pytest.raises(tgpt.DataError, match=re.escape(f"{sidecar(caseops, 0)} is a CaseOps byte sidecar, but "
                                                       f"TOKENIZER_PATH={plain['TOKENIZER_PATH']} is not")):
        load_with(tgpt, caseops, plain)


def test_the_run_stops_before_training(datasets, tmp_path):
    env = dict(TINY_MODEL_ENV, **dict(datasets["caseops"], TOKENIZER_PATH=datasets["plain"]["TOKENIZER_PATH"]),
               ALLOW_TOKENIZER_MISMATCH="1", ITERATIONS="1")
    out = subprocess.run([sys.executable, str(REPO / "train_gpt.py")], cwd=tmp_path, env=run_env(env),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode != 0 and "step:" not in out.stdout
    assert "is a CaseOps byte sidecar, but TOKENIZER_PATH=" in (out.stdout + out.stderr).splitlines()[-1]


# ---- shards made elsewhere: the manifest written for an existing folder ----

def write_manifest(env: dict, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "data" / "write_manifest.py"), env["DATA_PATH"], "--tokenizer",
                           env["TOKENIZER_PATH"], *extra], capture_output=True, text=True, timeout=300, env=run_env({}))


def test_shards_without_a_manifest_name_the_command_that_writes_one_and_it_makes_them_usable(tgpt, copy_of,
                                                                                             datasets):
    """The 2026-04-27 record's prepare_caseops_data.py writes shards and sidecars but no manifest.json: the trainer's
    error named no remedy. The command it names writes the manifest (tokenizer sha256, text transform, sidecar
    total) from the shards themselves."""
    env = copy_of("caseops")
    manifest_path = Path(env["DATA_PATH"]) / "manifest.json"
    built = json.loads(manifest_path.read_text())
    manifest_path.unlink()
    command = "tools/py data/write_manifest.py %s --tokenizer %s" % (env["DATA_PATH"], env["TOKENIZER_PATH"])
    with pytest.raises(tgpt.DataError, match=re.escape("for shards made elsewhere, %s writes it" % command)):
        load_with(tgpt, env, env)
    out = write_manifest(env)
    assert out.returncode == 0 and out.stdout.startswith("wrote %s" % manifest_path), out.stderr
    written = json.loads(manifest_path.read_text())
    for key in ("text_transform", "stats"):
        assert written["datasets"][0][key] == built["datasets"][0][key], key  # what the build itself wrote
    assert written["datasets"][0]["stats"]["bytes_val"] == datasets["val_utf8_bytes"]
    with open(env["TOKENIZER_PATH"], "rb") as handle:
        assert written["tokenizers"][0]["sha256"] == hashlib.sha256(handle.read()).hexdigest()
    assert load_with(tgpt, env, env).target_bytes.sum() > 0  # usable: the trainer's checks pass
    again = write_manifest(env)
    assert again.returncode == 1 and again.stderr == "write_manifest: error: %s already exists (pass --overwrite to " \
                                                     "replace it)\n" % manifest_path


def test_write_manifest_refuses_shards_its_tokenizer_did_not_make(copy_of, datasets):
    plain = datasets["plain"]
    cases = []
    env = copy_of("caseops")
    os.remove(Path(env["DATA_PATH"]) / "manifest.json")
    cases.append((dict(env, TOKENIZER_PATH=plain["TOKENIZER_PATH"]),
                  "%s is a CaseOps byte sidecar, but %s is not a CaseOps tokenizer" % (sidecar(env, 0),
                                                                                      plain["TOKENIZER_PATH"])))
    counts = np.fromfile(sidecar(env), dtype="<u2", offset=1024)
    write_shard(sidecar(env), np.roll(counts, 1))  # another shard's sidecar: bytes where this one has BOS
    cases.append((env, "%s counts bytes at BOS positions of %s" % (sidecar(env), env["DATA_PATH"] +
                                                                   "/fineweb_val_000001.bin")))
    other = copy_of("plain")
    os.remove(Path(other["DATA_PATH"]) / "manifest.json")
    cases.append((dict(other, TOKENIZER_PATH=env["TOKENIZER_PATH"]),
                  "needs: its bpb divides by the original text's bytes"))
    for case_env, message in cases:
        out = write_manifest(case_env)
        assert out.returncode == 1 and out.stderr.startswith("write_manifest: error: ") and message in out.stderr, (
            message, out.stderr)
        assert not (Path(case_env["DATA_PATH"]) / "manifest.json").exists()
