"""A dataset and the tokenizer that made it stay paired: build_shards.py never replaces another
dataset's tokenizer or shards unless asked, every dataset dir carries its tokenizer's sha256, and data/manifest.py
reads it back. Also: the 8192-vocab build of the 2026-04-09 recipe, and the one-line message for a
missing module. Command-line tests run the real scripts in a copy of data/ (data_isolated_repo)."""

import gzip
import hashlib
import json
import lzma
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from test_data_fixtures import (  # noqa: F401  (fixtures)
    DATA_SAMPLE_PATH,
    data_isolated_repo,
    data_sample_docs,
    data_slice_jsonl,
    data_tokenizer,
    data_tokenizer_8192,
)
from data.build_shards import BuildConfig, BuildError, build_shards
from data.manifest import datasets_using_tokenizer, expected_tokenizer_sha256
from data.shards import list_shards, read_shard
from data.sp_tokenizer import TokenizerError, train_tokenizer

REPO_ROOT = Path(__file__).resolve().parent.parent


def sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def folder_hashes(directory) -> dict:
    return {path.name: sha256(path) for path in sorted(Path(directory).iterdir()) if path.is_file()}


def run_build(root, *args):
    return subprocess.run(
        [sys.executable, "data/build_shards.py", "--no-progress", *map(str, args)],
        cwd=root, capture_output=True, text=True, timeout=300,
    )


def summary_paths(stdout: str):
    match = re.search(r"train with DATA_PATH=(\S+) TOKENIZER_PATH=(\S+) VOCAB_SIZE=(\d+)", stdout)
    assert match, stdout
    return Path(match.group(1)), Path(match.group(2)), int(match.group(3))


def write_jsonl(path, texts):
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    return path


def sample_texts():
    with lzma.open(DATA_SAMPLE_PATH, "rt", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle]


def readme_command(pattern: str) -> list:
    """The data/README.md command line that matches `pattern`, split into arguments."""
    readme = (REPO_ROOT / "data" / "README.md").read_text(encoding="utf-8")
    commands = [line for line in re.findall(r"`(tools/py [^`]+)`", readme) if re.search(pattern, line)]
    assert commands, f"data/README.md has no command matching {pattern!r}"
    return commands[0].split()


def test_own_text_built_as_the_readme_shows_leaves_the_default_tokenizer_alone(tmp_path):
    root = data_isolated_repo(tmp_path / "repo")
    default = run_build(root, "--workers", "1")  # the bundled sample, into the trainer's default paths
    assert default.returncode == 0, default.stderr
    default_model = root / "data" / "tokenizers" / "fineweb_1024_bpe.model"
    default_dataset = root / "data" / "datasets" / "fineweb10B_sp1024"
    before = (sha256(default_model), folder_hashes(default_dataset))

    # The README's own-text command, exactly as written. Its inputs are made from the sample's text: 300
    # JSONL documents, then plain text whose paragraphs are the lines of 200 more (over 1,000 documents in
    # all, so its --val-docs 1000 leaves a train split).
    command = readme_command(r"build_shards\.py a\.jsonl\.xz b\.txt\.gz")
    texts = sample_texts()
    with lzma.open(root / "a.jsonl.xz", "wt", encoding="utf-8", preset=0) as handle:
        handle.writelines(json.dumps({"text": text}) + "\n" for text in texts[:300])
    lines = [line.strip() for text in texts[300:500] for line in text.split("\n") if line.strip()]
    assert 300 + len(lines) > 1000
    (root / "b.txt.gz").write_bytes(gzip.compress("\n\n".join(lines).encode("utf-8")))
    own = subprocess.run([sys.executable, *command[1:], "--no-progress"], cwd=root, capture_output=True,
                         text=True, timeout=300)
    assert own.returncode == 0, own.stderr

    assert (sha256(default_model), folder_hashes(default_dataset)) == before
    data_path, tokenizer_path, vocab_size = summary_paths(own.stdout)
    out_dir = command[command.index("--out-dir") + 1]
    assert data_path == (root / out_dir).resolve() and vocab_size == 1024
    assert tokenizer_path == (root / "data" / "tokenizers" / f"{Path(out_dir).name}.model").resolve()
    assert expected_tokenizer_sha256(data_path)[0] == sha256(tokenizer_path) != before[0]
    assert expected_tokenizer_sha256(default_dataset)[0] == before[0]
    manifest = json.loads((data_path / "manifest.json").read_text())
    assert manifest["datasets"][0]["name"] == Path(out_dir).name
    assert manifest["datasets"][0]["tokenizer_name"] == manifest["tokenizers"][0]["name"] == Path(out_dir).name


def test_replacing_another_datasets_tokenizer_needs_overwrite(tmp_path, data_sample_docs):
    root = data_isolated_repo(tmp_path / "repo")
    first = write_jsonl(root / "first.jsonl", data_sample_docs[:200])
    second = write_jsonl(root / "second.jsonl", data_sample_docs[200:])
    assert run_build(root, first, "--val-docs", 20, "--workers", 1).returncode == 0
    model = root / "data" / "tokenizers" / "fineweb_1024_bpe.model"
    dataset = root / "data" / "datasets" / "fineweb10B_sp1024"
    before = (sha256(model), folder_hashes(dataset))

    again = run_build(root, first, "--val-docs", 20, "--workers", 1)  # same text -> same bytes: allowed
    assert again.returncode == 0, again.stderr
    assert (sha256(model), folder_hashes(dataset)) == before

    refused = run_build(root, second, "--val-docs", 20, "--workers", 1)
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("build_shards: error: "), refused.stderr
    assert str(model) in lines[0] and "--overwrite" in lines[0] and str(dataset) in lines[0]
    assert (sha256(model), folder_hashes(dataset)) == before

    # A tokenizer file named explicitly is protected the same way.
    named = run_build(root, second, "--val-docs", 20, "--workers", 1, "--tokenizer-out", model,
                      "--out-dir", root / "data" / "datasets" / "second")
    assert named.returncode == 1 and str(model) in named.stderr and "--overwrite" in named.stderr
    assert not list_shards(root / "data" / "datasets" / "second", "train")

    forced = run_build(root, second, "--val-docs", 20, "--workers", 1, "--overwrite")
    assert forced.returncode == 0, forced.stderr
    assert sha256(model) != before[0] and expected_tokenizer_sha256(dataset)[0] == sha256(model)
    assert "warning: --overwrite: replacing" in forced.stdout


def quiet(_message):
    pass


def build(inputs, out_dir, tokenizer=None, **overrides):
    values = dict(inputs=tuple(inputs), out_dir=Path(out_dir), tokenizer=tokenizer, val_docs=20, workers=1,
                  tokenizer_out=Path(out_dir).parent / f"{Path(out_dir).name}.model")
    values.update(overrides)
    messages = []
    manifest = build_shards(BuildConfig(**values), log=messages.append)
    return manifest, messages


def test_shards_of_another_or_an_unknown_tokenizer_are_replaced_only_with_overwrite(
    tmp_path, data_slice_jsonl, data_tokenizer, data_sample_docs
):
    out_dir = tmp_path / "datasets" / "mine"
    build([data_slice_jsonl], out_dir, data_tokenizer)
    before = folder_hashes(out_dir)
    other = tmp_path / "other.model"
    other.write_bytes(train_tokenizer(data_sample_docs[:300], 1024))
    with pytest.raises(BuildError, match="holds a dataset made with another tokenizer") as caught:
        build([data_slice_jsonl], out_dir, other)
    assert str(out_dir) in str(caught.value) and "--overwrite" in str(caught.value)
    assert folder_hashes(out_dir) == before

    (out_dir / "manifest.json").unlink()  # shards whose tokenizer nobody recorded
    with pytest.raises(BuildError, match="made with an unknown tokenizer") as caught:
        build([data_slice_jsonl], out_dir)  # refused before the tokenizer is trained
    assert "--overwrite" in str(caught.value) and not (out_dir.parent / "mine.model").exists()

    manifest, messages = build([data_slice_jsonl], out_dir, other, overwrite=True)
    assert manifest["tokenizers"][0]["sha256"] == sha256(other) == expected_tokenizer_sha256(out_dir)[0]
    assert any(m.startswith(f"warning: --overwrite: replacing the 2 shard(s) in {out_dir}, made with an unknown")
               for m in messages)


def test_expected_tokenizer_sha256_names_the_reason_when_unknown(tmp_path, data_slice_jsonl, data_tokenizer):
    directory = tmp_path / "datasets" / "d"
    assert expected_tokenizer_sha256(directory) == (None, f"{directory / 'manifest.json'} does not exist")
    manifest, _ = build([data_slice_jsonl], directory, data_tokenizer)
    sha, detail = expected_tokenizer_sha256(directory)
    assert sha == sha256(data_tokenizer) and "fineweb_1024_bpe" in detail
    assert datasets_using_tokenizer(sha, tmp_path / "datasets") == [directory]

    def reason_after(change):
        broken = json.loads(json.dumps(manifest))
        change(broken)
        (directory / "manifest.json").write_text(json.dumps(broken))
        sha, reason = expected_tokenizer_sha256(directory)
        assert sha is None
        return reason

    assert "no datasets[0]" in reason_after(lambda m: m.update(datasets=[]))
    assert "no tokenizers[] entry named 'x'" in reason_after(lambda m: m["datasets"][0].update(tokenizer_name="x"))
    assert "has no sha256" in reason_after(lambda m: m["tokenizers"][0].pop("sha256"))
    (directory / "manifest.json").write_text("{not json")
    assert "unreadable" in expected_tokenizer_sha256(directory)[1]


# ---- the 2026-04-09 recipe's vocabulary: 8192 --------------------------------------------------------------


def test_vocab_8192_build_uses_the_recipe_names(tmp_path, data_slice_jsonl):
    root = data_isolated_repo(tmp_path / "repo")
    result = run_build(root, data_slice_jsonl, "--vocab-size", 8192, "--val-docs", 50, "--workers", 1)
    assert result.returncode == 0, result.stderr
    data_path, tokenizer_path, vocab_size = summary_paths(result.stdout)
    assert data_path == (root / "data" / "datasets" / "fineweb10B_sp8192").resolve() and vocab_size == 8192
    assert tokenizer_path == (root / "data" / "tokenizers" / "fineweb_8192_bpe.model").resolve()
    manifest = json.loads((data_path / "manifest.json").read_text())
    dataset, tokenizer = manifest["datasets"][0], manifest["tokenizers"][0]
    assert (dataset["name"], dataset["tokenizer_name"]) == ("fineweb10B_sp8192", "fineweb_8192_bpe")
    assert (tokenizer["name"], tokenizer["vocab_size"]) == ("fineweb_8192_bpe", 8192)
    assert expected_tokenizer_sha256(data_path)[0] == sha256(tokenizer_path)

    processor = spm.SentencePieceProcessor(model_file=str(tokenizer_path))
    assert processor.vocab_size() == 8192
    # The 2026-04-09 trainer asserts that "▁" has an id of its own (SPEC_0409 §2).
    assert processor.id_to_piece(processor.piece_to_id("\u2581")) == "\u2581"
    tokens = np.concatenate([read_shard(p, vocab_size=8192) for p in list_shards(data_path, "train")])
    assert tokens.max() >= 1024  # the larger vocabulary is really used
    assert not (root / "data" / "datasets" / "fineweb10B_sp1024").exists()


def test_the_bundled_sample_is_enough_text_for_vocab_8192():
    texts = sample_texts()
    assert len(texts) == 4000
    processor = spm.SentencePieceProcessor(model_proto=train_tokenizer(texts, 8192))
    assert processor.vocab_size() == 8192


def test_too_little_text_for_vocab_8192_is_a_named_error(tmp_path, data_sample_docs):
    few = write_jsonl(tmp_path / "few.jsonl", data_sample_docs[:12])
    with pytest.raises(TokenizerError, match=r"too small for this vocab size.*smaller --vocab-size"):
        build([few], tmp_path / "datasets" / "few", vocab_size=8192, val_docs=2)
    assert not list_shards(tmp_path / "datasets" / "few", "val")


# ---- a Python without the tools' modules ----------------------------------------------------------------


ABSENT = "raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n"
BROKEN = "raise ImportError('numpy.core.multiarray failed to import')\n"


@pytest.mark.parametrize(
    "script, module, stub",
    [
        ("data/build_shards.py", "numpy", ABSENT),
        ("data/build_shards.py", "sentencepiece", ABSENT),
        ("data/build_shards.py", "numpy", BROKEN),
        ("data/cached_challenge_fineweb.py", "huggingface_hub", ABSENT),
        ("data/cached_challenge_fineweb.py", "numpy", ABSENT),
        ("bench/shard_build.py", "sentencepiece", ABSENT),
    ],
)
def test_a_missing_module_is_one_line_naming_it_and_the_quick_start_environment(tmp_path, script, module, stub):
    # A module on PYTHONPATH that fails to import as an absent one does (ABSENT) or a broken install (BROKEN).
    (tmp_path / f"{module}.py").write_text(stub.format(module=module))
    result = subprocess.run(
        [sys.executable, str(REPO_ROOT / script), "--help"], cwd=tmp_path, capture_output=True, text=True,
        timeout=120, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"cannot import {module}" in lines[0] and f"tools/py {script}" in lines[0]
    assert ("failed to import" in lines[0]) == (stub == BROKEN)  # why a present module fails, not an absent one
    assert "pip install -r requirements.txt" in lines[0]
