"""CaseOps data (SPEC_0427 §2): the lossless case transform, build_shards.py --caseops (operator pieces,
val byte sidecars that count the original text's UTF-8 bytes) and the downloader's CaseOps variant."""

import hashlib
import json
import random
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest

from test_data_fixtures import DATA_SAMPLE_PATH, REPO_ROOT, data_sample_docs, data_slice_jsonl  # noqa: F401
from data import caseops
from data.build_shards import BuildConfig, BuildError, build_shards
from data.caseops import ALLCAPS, CAPNEXT, ESC, TITLE
from data.shards import list_shards, list_sidecars, read_shard, write_shard

RECORD_TOKENIZER_NAME = "fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model"
RECORD_TOKENIZER_MD5 = "b73929616bf6303b953396b767a29b99"
VARIANT = "sp1024_lossless_caps_caseops_v1_reserved"


def all_sample_docs():
    import lzma
    with lzma.open(DATA_SAMPLE_PATH, "rt", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle]


# ---- the transform ----

def test_readme_examples_give_the_documented_output():
    assert caseops.encode("The NASA Launch") == f"{TITLE}the {ALLCAPS}nasa {TITLE}launch"
    assert caseops.encode("iPhone OpenAI") == f"i{CAPNEXT}phone {TITLE}open{CAPNEXT}a{CAPNEXT}i"


@pytest.mark.parametrize("text,encoded", [
    ("I", TITLE + "i"), ("A1B", f"{TITLE}a1{TITLE}b"), ("ABc", f"{TITLE}a{CAPNEXT}bc"), ("aBC", f"a{CAPNEXT}b{CAPNEXT}c"),
    ("NASA's", f"{ALLCAPS}nasa's"), ("Éclair ÉCLAIR", f"Éclair É{ALLCAPS}clair"),  # non-ASCII untouched
    (f"x{TITLE}y{ESC}", f"x{ESC}{TITLE}y{ESC}{ESC}"), ("", ""), ("42 ü", "42 ü")])
def test_rules_of_spec_0427_section_2(text, encoded):
    assert caseops.encode(text) == encoded
    assert caseops.decode(encoded) == text


def random_text(rng: random.Random) -> str:
    """Mixed scripts, digits, whitespace, the four operators themselves, ASCII words in every case pattern."""
    pools = ["abc", "xyz", "Hello", "WORLD", "iPhone", "OpenAI", "a", "I", "Q", "qR", "0123", " ", "  ", "\n", "\n\n",
             "\t", "\u00a0", "é", "Ω", "ß", "東京", "😀", "e\u0301", "ﬁ", "Ａ", "①", ".", ",", "'",
             TITLE, ALLCAPS, CAPNEXT, ESC, "\ue000", "\ue005"]
    pieces = [rng.choice(pools) for _ in range(rng.randrange(0, 30))]
    letters = "".join(rng.choice("aAbBzZ") for _ in range(rng.randrange(0, 6)))
    return "".join(pieces) + letters


def test_decode_inverts_encode_on_random_text():
    rng = random.Random(0)
    for _ in range(3000):
        text = random_text(rng)
        encoded = caseops.encode(text)
        assert caseops.decode(encoded) == text, repr(text)
        assert not any("A" <= char <= "Z" for char in encoded)


def test_decode_inverts_encode_on_every_sample_document():
    for text in all_sample_docs():
        assert caseops.decode(caseops.encode(text)) == text


@pytest.mark.parametrize("bad", [ESC, ESC + "x", TITLE, TITLE + "A", CAPNEXT + " ", ALLCAPS + "a", ALLCAPS + "1"])
def test_decode_rejects_text_encode_never_writes(bad):
    with pytest.raises(ValueError, match="CaseOps text"):
        caseops.decode(bad)


# ---- tokenizers ----

@pytest.fixture(scope="module")
def caseops_tokenizer(tmp_path_factory, data_sample_docs):
    """A CaseOps tokenizer (vocab 1024, the operators as user-defined pieces) trained on the sample slice."""
    from data.sp_tokenizer import save_tokenizer, train_tokenizer
    path = tmp_path_factory.mktemp("caseops_tokenizer") / "fineweb_1024_bpe_lossless_caps_caseops_v1_reserved.model"
    texts = [caseops.encode(text) for text in data_sample_docs]
    save_tokenizer(train_tokenizer(texts, 1024, "caseops", caseops.CONTROLS), path)
    return path


def record_tokenizer() -> Path:
    """The 2026-04-27 record's tokenizer from a `shared/caseops/` folder beside a parent of the repo."""
    for parent in REPO_ROOT.parents:
        path = parent / "shared" / "caseops" / RECORD_TOKENIZER_NAME
        if path.is_file():
            assert hashlib.md5(path.read_bytes()).hexdigest() == RECORD_TOKENIZER_MD5, path
            return path
    pytest.skip(f"the record's tokenizer shared/caseops/{RECORD_TOKENIZER_NAME} is not beside this checkout")


def test_operators_are_pieces_4_to_7_of_trained_and_record_tokenizers(caseops_tokenizer):
    import sentencepiece as spm
    for path in (caseops_tokenizer, record_tokenizer()):
        processor = spm.SentencePieceProcessor(model_file=str(path))
        assert [processor.id_to_piece(i) for i in range(4, 8)] == list(caseops.CONTROLS)
        assert caseops.is_caseops_tokenizer(processor)


# ---- build_shards --caseops ----

def tricky_documents(count: int, seed: int = 1) -> list:
    """A second corpus: text the tokenizer's nmt_nfkc normalization changes (blank lines, runs of spaces, NBSP,
    ligatures, full-width letters, leading and trailing whitespace) and operator characters, in every document
    at least one word (a document of whitespace only has no token to carry its bytes)."""
    rng = random.Random(seed)
    return [("  " if index % 3 == 0 else "") + "Word " + random_text(rng) + ("\n\n " if index % 4 == 0 else "")
            for index in range(count)]


def build(tmp_path, inputs, tokenizer, val_docs, **overrides) -> Path:
    out_dir = tmp_path / "datasets" / "fineweb10B_sp1024_lossless_caps_caseops_v1_reserved"
    config = dict(inputs=tuple(inputs), out_dir=out_dir, tokenizer=tokenizer, tokenizer_out=tmp_path / "tok.model",
                  vocab_size=1024, val_docs=val_docs, caseops=True)
    build_shards(BuildConfig(**dict(config, **overrides)), log=lambda message: None)
    return out_dir


def per_document(out_dir: Path) -> tuple:
    """[(token ids, sidecar entries)] per val document, split at BOS, from all val shards and sidecars in order."""
    tokens = np.concatenate([read_shard(path) for path in list_shards(out_dir, "val")])
    counts = np.concatenate([read_shard(path) for path in list_sidecars(out_dir)])
    assert tokens.size == counts.size
    starts = list(np.flatnonzero(tokens == 1)) + [tokens.size]
    assert counts[tokens == 1].sum() == 0  # BOS stands for no byte
    return [(tokens[a + 1:b], counts[a:b]) for a, b in zip(starts, starts[1:])]


def write_jsonl(path: Path, texts) -> Path:
    path.write_text("".join(json.dumps({"text": text}) + "\n" for text in texts), encoding="utf-8")
    return path


@pytest.mark.parametrize("corpus", ["sample", "tricky"])
def test_sidecar_counts_the_original_utf8_bytes_of_every_val_document(tmp_path, caseops_tokenizer, corpus):
    import sentencepiece as spm
    texts = all_sample_docs()[:300] if corpus == "sample" else tricky_documents(300)
    source = write_jsonl(tmp_path / "docs.jsonl", texts)
    out_dir = build(tmp_path, [source], caseops_tokenizer, 250, shard_size=20_000 if corpus == "sample" else 3_000,
                    workers=2)
    assert len(list_sidecars(out_dir)) == len(list_shards(out_dir, "val")) > 1  # one sidecar per val shard
    documents = per_document(out_dir)
    processor = spm.SentencePieceProcessor(model_file=str(caseops_tokenizer))
    assert len(documents) == 250
    for text, (ids, counts) in zip(texts, documents):
        assert ids.tolist() == processor.encode(caseops.encode(text))
        assert int(counts.sum()) == len(text.encode("utf-8")), repr(text)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    dataset = manifest["datasets"][0]
    assert dataset["text_transform"] == "lossless_caps_caseops_v1"
    assert dataset["stats"]["bytes_val"] == sum(len(text.encode("utf-8")) for text in texts[:250])
    sidecars = [shard for shard in dataset["shards"] if shard["split"] == "val_bytes"]
    assert [shard["name"] for shard in sidecars] == [path.name for path in list_sidecars(out_dir)]
    if corpus == "tricky":  # the tokens alone do not give the text back: the sidecar carries the byte count
        decoded = [caseops.decode(processor.decode(ids.tolist())) for ids, _ in documents]
        assert sum(a != b for a, b in zip(decoded, texts)) > 100


def test_record_tokenizer_sidecar_totals_the_sample_bytes(tmp_path):
    texts = all_sample_docs()[:60]
    source = write_jsonl(tmp_path / "docs.jsonl", texts)
    out_dir = build(tmp_path, [source], record_tokenizer(), 50, vocab_size=8192)
    assert [int(counts.sum()) for _, counts in per_document(out_dir)] == [len(t.encode("utf-8")) for t in texts[:50]]


def test_the_tokenizer_must_match_the_caseops_flag(tmp_path, caseops_tokenizer, data_slice_jsonl):
    from data.sp_tokenizer import save_tokenizer, train_tokenizer
    plain = tmp_path / "plain.model"
    save_tokenizer(train_tokenizer(all_sample_docs()[:200], 1024), plain)
    with pytest.raises(BuildError, match=f"--caseops needs a CaseOps tokenizer, and {plain} lacks"):
        build(tmp_path, [data_slice_jsonl], plain, 50)
    with pytest.raises(BuildError, match=f"{caseops_tokenizer} is a CaseOps tokenizer .*: add --caseops"):
        build(tmp_path, [data_slice_jsonl], caseops_tokenizer, 50, caseops=False)


def test_trained_caseops_tokenizer_and_default_paths(tmp_path, data_slice_jsonl):
    from data.build_shards import build_parser, config_from_args
    config = config_from_args(build_parser().parse_args(["--caseops", "--vocab-size", "8192"]))
    assert config.out_dir.name == "fineweb10B_sp8192_lossless_caps_caseops_v1_reserved"
    assert config.tokenizer_out.name == "fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model"
    assert config.tokenizer_out.parent.name == "tokenizers" and config.caseops
    out_dir = build(tmp_path, [data_slice_jsonl], None, 50)
    import sentencepiece as spm
    processor = spm.SentencePieceProcessor(model_file=str(tmp_path / "tok.model"))
    assert [processor.id_to_piece(i) for i in range(4, 8)] == list(caseops.CONTROLS)
    assert sum(int(c.sum()) for _, c in per_document(out_dir)) == sum(
        len(json.loads(line)["text"].encode("utf-8")) for line in data_slice_jsonl.read_text().splitlines()[:50])
    # a plain rebuild into the same folder leaves no stale sidecar behind
    build(tmp_path, [data_slice_jsonl], None, 50, caseops=False, overwrite=True)
    assert not list_sidecars(out_dir) and "text_transform" not in json.loads((out_dir / "manifest.json").read_text())


def test_nfkc_is_not_the_identity_on_the_tricky_corpus():
    """Why the sidecar exists: SentencePiece's nmt_nfkc rewrites characters of the original text."""
    assert any(unicodedata.normalize("NFKC", text) != text for text in tricky_documents(20))


# ---- the downloader's CaseOps variant ----

@pytest.fixture
def caseops_hub(tmp_path, caseops_tokenizer, data_slice_jsonl):
    """A fake hub repo holding a CaseOps dataset (two val shards with sidecars) in the challenge layout."""
    from test_data_download import ROOT, FakeHub
    remote = tmp_path / "remote"
    tokenizers = remote / ROOT / "tokenizers"
    tokenizers.mkdir(parents=True)
    for suffix in (".model", ".vocab"):
        shutil.copy(caseops_tokenizer.with_suffix(suffix), tokenizers / caseops_tokenizer.with_suffix(suffix).name)
    out_dir = remote / ROOT / "datasets" / ("fineweb10B_" + VARIANT)
    build_shards(BuildConfig(inputs=(data_slice_jsonl,), out_dir=out_dir, tokenizer_out=tmp_path / "unused.model",
                             tokenizer=tokenizers / caseops_tokenizer.name, vocab_size=1024, val_docs=50,
                             shard_size=20_000, caseops=True), log=lambda message: None)
    manifest = json.loads((out_dir / "manifest.json").read_text())
    manifest["tokenizers"][0]["model_path"] = f"tokenizers/{caseops_tokenizer.name}"
    manifest["tokenizers"][0].pop("vocab_path")
    for key in ("text_transform", "shards"):  # what the published manifest holds is not known: assume little
        manifest["datasets"][0].pop(key)
    (remote / ROOT / "manifest.json").write_text(json.dumps(manifest))
    (out_dir / "manifest.json").unlink()
    hub = FakeHub(remote)
    yield hub, out_dir
    hub.close()


def download_caseops(hub, tmp_path):
    from data.cached_challenge_fineweb import HubSource, download
    from test_data_download import REPO_ID, ROOT
    source = HubSource(REPO_ID, ROOT, endpoint=hub.url, cache_dir=tmp_path / "hub_cache")
    return download(VARIANT, 1, source, tmp_path / "data", log=lambda message: None)


def test_download_fetches_the_sidecars_and_records_the_byte_total(tmp_path, caseops_hub):
    hub, remote_dir = caseops_hub
    report = download_caseops(hub, tmp_path)
    local = tmp_path / "data" / "datasets" / ("fineweb10B_" + VARIANT)
    assert [p.name for p in list_sidecars(local)] == [p.name for p in list_sidecars(remote_dir)]
    assert len(list_sidecars(local)) == report.shards_val >= 2
    for path in list_sidecars(local):
        assert path.read_bytes() == (remote_dir / path.name).read_bytes()
    dataset = json.loads((local / "manifest.json").read_text())["datasets"][0]
    expected = sum(int(read_shard(path).sum()) for path in list_sidecars(remote_dir))
    assert dataset["stats"]["bytes_val"] == expected and dataset["text_transform"] == "lossless_caps_caseops_v1"


def test_download_refuses_a_sidecar_of_another_length(tmp_path, caseops_hub):
    from data.cached_challenge_fineweb import DownloadError
    hub, remote_dir = caseops_hub
    sidecar = list_sidecars(remote_dir)[1]
    write_shard(sidecar, read_shard(sidecar)[:-1])
    with pytest.raises(DownloadError, match=f"{sidecar.name} has .* byte counts but .*fineweb_val_000001.bin has"):
        download_caseops(hub, tmp_path)


def test_download_refuses_a_plain_tokenizer_for_a_caseops_variant(tmp_path, caseops_hub):
    from data.cached_challenge_fineweb import DownloadError
    from data.sp_tokenizer import save_tokenizer, train_tokenizer
    hub, remote_dir = caseops_hub
    model = next((hub.directory / "datasets" / "tokenizers").glob("*.model"))
    save_tokenizer(train_tokenizer(all_sample_docs()[:200], 1024), model)
    with pytest.raises(DownloadError, match="not a CaseOps tokenizer"):
        download_caseops(hub, tmp_path)
