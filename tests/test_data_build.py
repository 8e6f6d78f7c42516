"""data/build_shards.py and the tokenizer: SPEC settings, exact token streams, determinism, errors."""

import gzip
import hashlib
import json
import lzma
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm

from test_data_fixtures import (data_sample_docs, data_slice_jsonl, data_tokenizer,  # noqa: F401  (fixtures)
                                data_tokenizer_8192)
from data.build_shards import BuildConfig, BuildError, build_shards
from data.corpus import CorpusError
from data.shards import list_shards, read_shard
from data.sp_tokenizer import (
    TokenizerError,
    model_settings,
    settings_differences,
    train_tokenizer,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
VAL_DOCS = 50


def config(inputs, out_dir, tokenizer=None, **overrides):
    values = dict(
        inputs=tuple(inputs),
        out_dir=Path(out_dir),
        tokenizer_out=Path(out_dir).parent / "trained" / "fineweb_1024_bpe.model",
        tokenizer=tokenizer,
        val_docs=VAL_DOCS,
        workers=1,
    )
    values.update(overrides)
    return BuildConfig(**values)


def quiet(_message):
    pass


def expected_stream(model_path, texts):
    """[BOS=1] + tokens per document, computed directly with sentencepiece."""
    processor = spm.SentencePieceProcessor(model_file=str(model_path))
    pieces = []
    for ids in processor.encode(list(texts), out_type=int):
        pieces += [1] + ids
    return np.array(pieces, dtype=np.uint16)


def split_tokens(out_dir, split):
    return np.concatenate([read_shard(path, vocab_size=1024) for path in list_shards(out_dir, split)])


def file_hashes(directory):
    return {path.name: hashlib.sha256(path.read_bytes()).hexdigest() for path in sorted(Path(directory).glob("*.bin"))}


# ---- tokenizer -------------------------------------------------------------------------------------------


def test_tokenizer_has_spec_settings(data_tokenizer):
    model_bytes = data_tokenizer.read_bytes()
    settings = model_settings(model_bytes)
    assert settings["model_type"] == "bpe" and settings["vocab_size"] == 1024
    assert settings["byte_fallback"] is True and settings["split_digits"] is True
    assert settings["add_dummy_prefix"] is False and settings["hard_vocab_limit"] is False
    assert settings["normalization_rule_name"] == "nmt_nfkc"
    assert abs(settings["character_coverage"] - 0.999) < 1e-6
    assert (settings["pad_id"], settings["bos_id"], settings["eos_id"], settings["unk_id"]) == (0, 1, 2, 3)
    assert settings_differences(settings, 1024) == []

    processor = spm.SentencePieceProcessor(model_file=str(data_tokenizer))
    assert processor.vocab_size() == 1024
    assert (processor.pad_id(), processor.bos_id(), processor.eos_id(), processor.unk_id()) == (0, 1, 2, 3)
    assert [processor.id_to_piece(i) for i in (4, 5, 259)] == ["<0x00>", "<0x01>", "<0xFF>"]
    assert all(processor.is_byte(i) for i in range(4, 260))
    # No dummy prefix: a text that starts with a word gets no leading "▁"; inner spaces still do.
    assert "".join(processor.encode("the cat", out_type=str)) == "the\u2581cat"
    # Byte fallback: a character never seen in training is spelled as its UTF-8 bytes.
    assert [processor.id_to_piece(i) for i in processor.encode("\u4e2d")] == ["<0xE4>", "<0xB8>", "<0xAD>"]
    # Digits are split one per piece.
    assert all(len(processor.id_to_piece(i).strip("\u2581")) <= 1 for i in processor.encode("2024 31337"))
    vocab_lines = data_tokenizer.with_suffix(".vocab").read_text(encoding="utf-8").splitlines()
    assert len(vocab_lines) == 1024 and vocab_lines[1].split("\t")[0] == "<s>"


def test_tokenizer_decodes_back_to_normalized_text(data_tokenizer, data_sample_docs):
    processor = spm.SentencePieceProcessor(model_file=str(data_tokenizer))
    for text in data_sample_docs[:100] + ["Caf\u00e9  \uff21BC\n\nx\u00a0y \U0001F600 \u4e2d\u6587 12345"]:
        normalized = processor.normalize(text).replace("\u2581", " ")
        assert processor.decode(processor.encode(text, out_type=int)) == normalized
    assert processor.normalize("\uff21  B") == "A\u2581B"  # NFKC folds and whitespace collapses


def test_settings_reader_detects_a_non_spec_tokenizer(data_sample_docs):
    import io

    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(data_sample_docs[:200]), model_writer=model, vocab_size=600, minloglevel=2,
    )  # sentencepiece defaults: unigram, dummy prefix, no byte fallback, pad disabled
    settings = model_settings(model.getvalue())
    assert settings["model_type"] == "unigram" and settings["add_dummy_prefix"] is True
    assert settings["pad_id"] == -1 and settings["unk_id"] == 0
    differences = " ".join(settings_differences(settings, 1024))
    for key in ("model_type", "vocab_size", "byte_fallback", "add_dummy_prefix", "pad_id", "unk_id"):
        assert key in differences


def test_training_is_deterministic(data_sample_docs, data_tokenizer):
    assert train_tokenizer(data_sample_docs, 1024) == data_tokenizer.read_bytes()


# ---- building shards -------------------------------------------------------------------------------------


def test_build_writes_exact_bos_prefixed_streams_and_manifest(
    tmp_path, data_slice_jsonl, data_tokenizer, data_sample_docs
):
    out_dir = tmp_path / "fineweb10B_sp1024"
    manifest = build_shards(config([data_slice_jsonl], out_dir, data_tokenizer), log=quiet)

    val = split_tokens(out_dir, "val")
    np.testing.assert_array_equal(val, expected_stream(data_tokenizer, data_sample_docs[:VAL_DOCS]))
    train = split_tokens(out_dir, "train")
    np.testing.assert_array_equal(train, expected_stream(data_tokenizer, data_sample_docs[VAL_DOCS:]))
    assert int((train == 1).sum()) == len(data_sample_docs) - VAL_DOCS  # one BOS per document, no EOS
    assert not (train == 2).any()

    dataset, tokenizer = manifest["datasets"][0], manifest["tokenizers"][0]
    assert json.loads((out_dir / "manifest.json").read_text()) == manifest
    stats = dataset["stats"]
    assert (stats["docs_val"], stats["docs_train"]) == (VAL_DOCS, len(data_sample_docs) - VAL_DOCS)
    assert stats["tokens_train"] == train.size and stats["files_val"] == stats["files_train"] == 1
    assert dataset["name"] == "fineweb10B_sp1024" and dataset["tokenizer_name"] == "fineweb_1024_bpe"
    for shard in dataset["shards"]:
        path = out_dir / shard["name"]
        assert shard["bytes"] == path.stat().st_size == 1024 + 2 * shard["tokens"]
        assert shard["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
    assert dataset["sources"] == [{
        "name": data_slice_jsonl.name, "bytes": data_slice_jsonl.stat().st_size, "docs": len(data_sample_docs),
        "sha256": hashlib.sha256(data_slice_jsonl.read_bytes()).hexdigest(),
    }]
    assert tokenizer["sha256"] == hashlib.sha256(data_tokenizer.read_bytes()).hexdigest()
    assert tokenizer["vocab_size"] == 1024 and tokenizer["trained_by_this_build"] is False


def test_small_shards_split_documents_and_flush_at_the_split_change(
    tmp_path, data_slice_jsonl, data_tokenizer, data_sample_docs
):
    out_dir = tmp_path / "out"
    build_shards(config([data_slice_jsonl], out_dir, data_tokenizer, shard_size=7000), log=quiet)
    for split, texts in (("val", data_sample_docs[:VAL_DOCS]), ("train", data_sample_docs[VAL_DOCS:])):
        shards = [read_shard(path) for path in list_shards(out_dir, split)]
        assert len(shards) >= 2
        assert all(shard.size == 7000 for shard in shards[:-1]) and 0 < shards[-1].size <= 7000
        np.testing.assert_array_equal(np.concatenate(shards), expected_stream(data_tokenizer, texts))
    assert [p.name for p in list_shards(out_dir, "val")][0] == "fineweb_val_000000.bin"
    assert [p.name for p in list_shards(out_dir, "train")][0] == "fineweb_train_000000.bin"


def test_builds_are_byte_identical_across_runs_and_worker_counts(tmp_path, data_slice_jsonl):
    first = tmp_path / "a" / "out"
    second = tmp_path / "b" / "out"
    build_shards(config([data_slice_jsonl], first, workers=1, shard_size=20000), log=quiet)
    build_shards(config([data_slice_jsonl], second, workers=2, shard_size=20000), log=quiet)
    assert len(file_hashes(first)) > 3 and file_hashes(first) == file_hashes(second)
    model_a = (tmp_path / "a" / "trained" / "fineweb_1024_bpe.model").read_bytes()
    assert model_a == (tmp_path / "b" / "trained" / "fineweb_1024_bpe.model").read_bytes()
    manifests = [json.loads((out / "manifest.json").read_text()) for out in (first, second)]
    for manifest in manifests:  # the tokenizer paths differ (a/ vs b/); everything else must not
        assert manifest["tokenizers"][0].pop("model_path").endswith("trained/fineweb_1024_bpe.model")
        manifest["tokenizers"][0].pop("vocab_path")
    assert manifests[0] == manifests[1]


def test_compressed_and_plain_text_inputs(tmp_path, data_sample_docs, data_tokenizer):
    docs = data_sample_docs[:120]
    lines = "".join(json.dumps({"text": text, "url": "u"}) + "\n\n" for text in docs).encode()
    (tmp_path / "c.jsonl.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "c.jsonl.xz").write_bytes(lzma.compress(lines))
    (tmp_path / "c.jsonl").write_bytes(lines)
    hashes = []
    for name in ("c.jsonl", "c.jsonl.gz", "c.jsonl.xz"):
        out_dir = tmp_path / f"out_{name}"
        build_shards(config([tmp_path / name], out_dir, data_tokenizer, val_docs=20), log=quiet)
        hashes.append(file_hashes(out_dir))
    assert hashes[0] == hashes[1] == hashes[2]

    paragraphs = ["First doc line one.\nline two.", "Second doc.", "Third\ndoc."]
    (tmp_path / "p.txt.gz").write_bytes(gzip.compress(("\n\n\n".join(paragraphs) + "\n").encode()))
    for unit, texts in (
        ("paragraph", paragraphs),
        ("line", ["First doc line one.", "line two.", "Second doc.", "Third", "doc."]),
        ("file", ["\n\n\n".join(paragraphs)]),
    ):
        out_dir = tmp_path / f"text_{unit}"
        if unit == "file":
            (tmp_path / "p2.txt").write_text("\n\n\n".join(paragraphs) + "\n")
            inputs = [tmp_path / "p.txt.gz", tmp_path / "p2.txt"]
            texts = texts * 2
        else:
            inputs = [tmp_path / "p.txt.gz"]
        manifest = build_shards(config(inputs, out_dir, data_tokenizer, val_docs=1, text_unit=unit), log=quiet)
        stream = np.concatenate([split_tokens(out_dir, "val"), split_tokens(out_dir, "train")])
        np.testing.assert_array_equal(stream, expected_stream(data_tokenizer, texts))
        assert manifest["datasets"][0]["stats"]["docs_total"] == len(texts)


# ---- errors ----------------------------------------------------------------------------------------------


def test_empty_corpus_is_a_named_error(tmp_path, data_tokenizer):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n  \n")
    for tokenizer in (data_tokenizer, None):
        with pytest.raises(CorpusError, match="empty corpus") as caught:
            build_shards(config([empty], tmp_path / "out", tokenizer), log=quiet)
        assert "empty.jsonl" in str(caught.value)
    assert not list((tmp_path / "out").glob("*.bin"))


def test_tokenizer_vocab_mismatch_is_a_named_error(tmp_path, data_slice_jsonl, data_tokenizer):
    with pytest.raises(TokenizerError) as caught:
        build_shards(config([data_slice_jsonl], tmp_path / "out", data_tokenizer, vocab_size=512), log=quiet)
    message = str(caught.value)
    assert data_tokenizer.name in message and "1024" in message and "512" in message


def test_bad_json_line_names_file_and_line(tmp_path, data_tokenizer):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": "also ok"}\n{"text": broken\n')
    for tokenizer in (data_tokenizer, None):  # found while encoding, or already while training
        with pytest.raises(CorpusError, match=r"bad\.jsonl:3: invalid JSON"):
            build_shards(config([bad], tmp_path / "out", tokenizer, val_docs=1), log=quiet)
    bad.write_text('{"text": "ok"}\n{"body": "x"}\n')
    with pytest.raises(CorpusError, match=r"bad\.jsonl:2: JSON line has no string field 'text'"):
        build_shards(config([bad], tmp_path / "out", data_tokenizer, val_docs=1, workers=2), log=quiet)


def test_val_docs_must_leave_train_docs_and_failed_builds_leave_output_untouched(
    tmp_path, data_slice_jsonl, data_tokenizer
):
    out_dir = tmp_path / "out"
    build_shards(config([data_slice_jsonl], out_dir, data_tokenizer), log=quiet)
    before = file_hashes(out_dir)
    with pytest.raises(BuildError, match="--val-docs 400 takes them all"):
        build_shards(config([data_slice_jsonl], out_dir, data_tokenizer, val_docs=400), log=quiet)
    assert file_hashes(out_dir) == before and (out_dir / "manifest.json").is_file()
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([*before, "manifest.json"])  # no staging left
    with pytest.raises(BuildError, match="val docs 0 must be >= 1"):
        build_shards(config([data_slice_jsonl], out_dir, data_tokenizer, val_docs=0), log=quiet)


def test_rebuild_replaces_stale_shards(tmp_path, data_slice_jsonl, data_tokenizer):
    out_dir = tmp_path / "out"
    build_shards(config([data_slice_jsonl], out_dir, data_tokenizer, shard_size=5000), log=quiet)
    many = len(list_shards(out_dir, "train"))
    build_shards(config([data_slice_jsonl], out_dir, data_tokenizer), log=quiet)
    assert many > 1 and len(list_shards(out_dir, "train")) == 1


# ---- command line ----------------------------------------------------------------------------------------


def run_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "data" / "build_shards.py"), *map(str, args)],
        cwd=cwd, capture_output=True, text=True, timeout=120,
    )


def test_cli_builds_from_any_directory_and_prints_a_summary(tmp_path, data_slice_jsonl, data_tokenizer):
    out_dir = tmp_path / "cli_out"
    result = run_cli(
        data_slice_jsonl, "--tokenizer", data_tokenizer, "--out-dir", out_dir, "--val-docs", 10, "--workers", 2,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "10 docs" in result.stdout and f"DATA_PATH={out_dir}" in result.stdout
    expected = expected_stream(data_tokenizer, json_texts(data_slice_jsonl)[:10])
    np.testing.assert_array_equal(split_tokens(out_dir, "val"), expected)


def test_cli_takes_the_vocab_size_of_a_given_tokenizer(tmp_path, data_slice_jsonl, data_tokenizer_8192):
    """`--tokenizer RECORD.model` alone failed: "tokenizer vocab size 8192 differs from --vocab-size" (the default
    1024); a tokenizer says its own size. A --vocab-size that differs from it is still an error."""
    result = run_cli(data_slice_jsonl, "--tokenizer", data_tokenizer_8192, "--out-dir", tmp_path / "out",
                     "--val-docs", 10, "--no-progress", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "vocab 8192;" in result.stdout and "VOCAB_SIZE=8192" in result.stdout
    assert json.loads((tmp_path / "out" / "manifest.json").read_text())["tokenizers"][0]["vocab_size"] == 8192
    mismatch = run_cli(data_slice_jsonl, "--tokenizer", data_tokenizer_8192, "--vocab-size", 1024, "--out-dir",
                       tmp_path / "other", cwd=tmp_path)
    assert mismatch.returncode == 1 and "differs from --vocab-size 1024" in mismatch.stderr


def json_texts(path):
    return [json.loads(line)["text"] for line in Path(path).read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize(
    "args, expected",
    [
        (["{missing}"], "missing.jsonl: input file not found"),
        (["{empty}", "--tokenizer", "{tokenizer}"], "empty corpus"),
        (["{slice}", "--tokenizer", "{tokenizer}", "--vocab-size", "2048"], "differs from --vocab-size 2048"),
        (["{slice}", "--sample"], "--sample cannot be combined"),
    ],
)
def test_cli_errors_are_one_line_without_traceback(tmp_path, data_slice_jsonl, data_tokenizer, args, expected):
    (tmp_path / "empty.jsonl").write_text("")
    names = {"missing": tmp_path / "missing.jsonl", "empty": tmp_path / "empty.jsonl",
             "tokenizer": data_tokenizer, "slice": data_slice_jsonl}
    result = run_cli(*(arg.format(**names) for arg in args), "--out-dir", tmp_path / "o", cwd=tmp_path)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("build_shards: error: ") and expected in lines[0]
