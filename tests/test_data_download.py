"""data/cached_challenge_fineweb.py against a local fake of the hub (a loopback HTTP server speaking the
hub's file-resolve API). huggingface_hub's real hf_hub_download is used, pointed at the fake through its
`endpoint` argument (in-process) or HF_ENDPOINT (command line): no network, real code path."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote

import numpy as np
import pytest

from test_data_fixtures import (  # noqa: F401  (fixtures)
    DATA_SAMPLE_PATH,
    data_sample_docs,
    data_slice_jsonl,
    data_tokenizer,
    data_tokenizer_8192,
)
from data.build_shards import BuildConfig, build_shards
from data.cached_challenge_fineweb import DownloadError, HubSource, download, summary_lines
from data.manifest import expected_tokenizer_sha256
from data.shards import list_shards, read_shard, write_shard

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "data" / "cached_challenge_fineweb.py"
REPO_ID = "test-owner/parameter-golf"
ROOT = "datasets"
DATASET = "fineweb10B_sp1024"
SHARDS_REMOTE = f"{ROOT}/datasets/{DATASET}"
SP8192_REPO_ID = "test-owner/sp8192-golf"  # plays kevclark/parameter-golf: the SP8192 record's data


class FakeHub:
    """Serves `directory` as dataset repo REPO_ID at revision main (and more repos added with `add_repo`), on
    127.0.0.1 only. Records requests: (method, path) for REPO_ID, (method, "<repo>:<path>") for the others.
    If `stall` names a file, its first GET sends half the body and then waits until `release` is set."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.repos = {REPO_ID: directory}
        self.requests = []
        self.stall = None
        self.stalled = threading.Event()
        self.release = threading.Event()
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_HEAD(self):
                hub.respond(self, send_body=False)

            def do_GET(self):
                hub.respond(self, send_body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def add_repo(self, repo_id: str, directory: Path) -> None:
        self.repos[repo_id] = directory

    @staticmethod
    def commit(directory: Path) -> str:
        """Like a git commit id: changes whenever any file of the repo changes (path, size, mtime)."""
        listing = sorted(
            (str(path.relative_to(directory)), path.stat().st_size, path.stat().st_mtime_ns)
            for path in directory.rglob("*") if path.is_file()
        )
        return hashlib.sha1(repr(listing).encode()).hexdigest()

    def gets(self) -> list:
        return [path for method, path in self.requests if method == "GET"]

    def respond(self, handler, send_body: bool) -> None:
        path = unquote(handler.path)
        repo_id, marker, relative = path.removeprefix("/datasets/").partition("/resolve/main/")
        if not path.startswith("/datasets/") or not marker or repo_id not in self.repos:
            error = "RepoNotFound" if "/resolve/" in path else None
            return self.not_found(handler, error)
        directory = self.repos[repo_id]
        self.requests.append((handler.command, relative if repo_id == REPO_ID else f"{repo_id}:{relative}"))
        file = directory / relative
        if not file.is_file():
            return self.not_found(handler, "EntryNotFound")
        data = file.read_bytes()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        handler.send_header("X-Repo-Commit", self.commit(directory))
        handler.end_headers()
        if not send_body:
            return
        if relative == self.stall and not self.stalled.is_set():
            handler.wfile.write(data[: len(data) // 2])
            handler.wfile.flush()
            self.stalled.set()
            self.release.wait(60)
            handler.close_connection = True
            return
        handler.wfile.write(data)

    @staticmethod
    def not_found(handler, error_code) -> None:
        handler.send_response(404)
        if error_code:
            handler.send_header("X-Error-Code", error_code)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def build_remote(remote: Path, dataset: str, tokenizer: Path, data_slice_jsonl: Path) -> Path:
    """<remote>/<root>/{manifest.json, datasets/<dataset>/*.bin, tokenizers/<tokenizer name>.{model,vocab}}."""
    tokenizers = remote / ROOT / "tokenizers"
    tokenizers.mkdir(parents=True)
    for suffix in (".model", ".vocab"):
        shutil.copy(tokenizer.with_suffix(suffix), tokenizers / f"{tokenizer.stem}{suffix}")
    out_dir = remote / ROOT / "datasets" / dataset
    build_shards(
        BuildConfig(
            inputs=(data_slice_jsonl,), out_dir=out_dir, tokenizer_out=tokenizers / "unused.model",
            tokenizer=tokenizers / f"{tokenizer.stem}.model", vocab_size=int(dataset.rsplit("sp", 1)[1]),
            val_docs=50, shard_size=40_000,
        ),
        log=lambda message: None,
    )
    os.replace(out_dir / "manifest.json", remote / ROOT / "manifest.json")
    return remote


@pytest.fixture(scope="module")
def data_pristine_remote(tmp_path_factory, data_slice_jsonl, data_tokenizer):
    """A remote tree in the challenge layout, built by our builder: <root>/manifest.json,
    <root>/datasets/fineweb10B_sp1024/*.bin, <root>/tokenizers/fineweb_1024_bpe.{model,vocab}."""
    return build_remote(tmp_path_factory.mktemp("data_remote"), DATASET, data_tokenizer, data_slice_jsonl)


@pytest.fixture(scope="module")
def data_sp8192_remote(tmp_path_factory, data_slice_jsonl, data_tokenizer_8192):
    """The second repo: fineweb10B_sp8192 and tokenizers/fineweb_8192_bpe.{model,vocab} only."""
    remote = tmp_path_factory.mktemp("data_remote_8192")
    return build_remote(remote, "fineweb10B_sp8192", data_tokenizer_8192, data_slice_jsonl)


@pytest.fixture
def data_hub(tmp_path, data_pristine_remote, data_sp8192_remote):
    """Fresh copies of the remotes (tests may damage them) served by a FakeHub: the sp1024 tree as REPO_ID,
    the sp8192 tree as SP8192_REPO_ID."""
    remote = tmp_path / "remote"
    shutil.copytree(data_pristine_remote, remote)
    shutil.copytree(data_sp8192_remote, tmp_path / "remote_8192")
    hub = FakeHub(remote)
    hub.add_repo(SP8192_REPO_ID, tmp_path / "remote_8192")
    yield hub
    hub.close()


def remote_manifest(hub) -> dict:
    return json.loads((hub.directory / ROOT / "manifest.json").read_text())


def write_remote_manifest(hub, manifest) -> None:
    (hub.directory / ROOT / "manifest.json").write_text(json.dumps(manifest))


def minimal_manifest(hub) -> dict:
    """Only the fields SPEC §2 says the challenge manifest is known to have: no per-shard counts."""
    full = remote_manifest(hub)
    dataset, tokenizer = full["datasets"][0], full["tokenizers"][0]
    stats = {key: dataset["stats"][key] for key in ("files_train", "files_val")}
    return {
        "datasets": [
            {"name": "fineweb10B_other", "stats": stats, "tokenizer_name": "x"},
            {"name": DATASET, "stats": stats, "tokenizer_name": tokenizer["name"]},
        ],
        "tokenizers": [{key: tokenizer[key] for key in ("name", "model_path", "vocab_path")}],
    }


def run_download(hub, tmp_path, train_shards, **kwargs):
    source = HubSource(REPO_ID, ROOT, endpoint=hub.url, cache_dir=tmp_path / "hub_cache")
    messages = []
    report = download("sp1024", train_shards, source, tmp_path / "data", log=messages.append, **kwargs)
    return report, messages


def remote_shard(hub, name) -> Path:
    return hub.directory / SHARDS_REMOTE / name


def local_shard(tmp_path, name) -> Path:
    return tmp_path / "data" / "datasets" / DATASET / name


def assert_same_file(local: Path, remote: Path) -> None:
    assert local.is_file(), local
    assert local.read_bytes() == remote.read_bytes(), local


def temp_files(directory: Path) -> list:
    return sorted(path.name for path in directory.rglob(".*tmp*"))


def test_fresh_download_places_verified_files(tmp_path, data_hub):
    report, messages = run_download(data_hub, tmp_path, 2)
    manifest = remote_manifest(data_hub)
    val_files = manifest["datasets"][0]["stats"]["files_val"]
    names = [f"fineweb_val_{i:06d}.bin" for i in range(val_files)]
    names += ["fineweb_train_000000.bin", "fineweb_train_000001.bin"]
    for name in names:
        assert_same_file(local_shard(tmp_path, name), remote_shard(data_hub, name))
    assert not local_shard(tmp_path, "fineweb_train_000002.bin").exists()
    for suffix in (".model", ".vocab"):
        assert_same_file(tmp_path / "data" / "tokenizers" / f"fineweb_1024_bpe{suffix}",
                         data_hub.directory / ROOT / "tokenizers" / f"fineweb_1024_bpe{suffix}")
    assert json.loads((tmp_path / "data" / "manifest.json").read_text()) == manifest
    assert report.counts == {"downloaded": len(names) + 2, "present": 0, "replaced": 0}
    assert report.tokens_train == sum(read_shard(local_shard(tmp_path, n)).size for n in names[val_files:])
    assert report.shards_with_counts == len(names)
    # The order SPEC §2 gives: manifest, val shards, train shards, tokenizer.
    expected_order = [f"{ROOT}/manifest.json"] + [f"{SHARDS_REMOTE}/{n}" for n in names] + [
        f"{ROOT}/tokenizers/fineweb_1024_bpe.model", f"{ROOT}/tokenizers/fineweb_1024_bpe.vocab"]
    assert data_hub.gets() == expected_order
    assert "token count (manifest) checked for every shard" in "\n".join(summary_lines(report))
    assert temp_files(tmp_path / "data") == []


def test_minimal_manifest_verifies_header_and_size_and_says_so(tmp_path, data_hub):
    write_remote_manifest(data_hub, minimal_manifest(data_hub))
    report, _ = run_download(data_hub, tmp_path, 1)
    assert report.shards_with_counts == 0 and report.counts["downloaded"] >= 4
    assert "the manifest has no per-shard token counts" in "\n".join(summary_lines(report))


def test_resume_skips_valid_files_and_replaces_partial_ones(tmp_path, data_hub):
    run_download(data_hub, tmp_path, 2)
    partial = local_shard(tmp_path, "fineweb_train_000001.bin")
    partial.unlink()  # (a new inode: the downloaded file is a hard link to the hub cache's blob)
    partial.write_bytes(remote_shard(data_hub, partial.name).read_bytes()[:3000])  # cut off mid-file
    stray = partial.parent / ".fineweb_train_000002.bin.tmp-99999"  # left by a killed process
    stray.write_bytes(b"partial")
    data_hub.requests.clear()

    report, messages = run_download(data_hub, tmp_path, 3)

    # Nothing is asked for the valid files; train_000001 comes back from the hub cache (HEAD only).
    assert data_hub.requests == [("HEAD", f"{SHARDS_REMOTE}/fineweb_train_000001.bin"),
                                 ("HEAD", f"{SHARDS_REMOTE}/fineweb_train_000002.bin"),
                                 ("GET", f"{SHARDS_REMOTE}/fineweb_train_000002.bin")]
    for name in ("fineweb_train_000000.bin", "fineweb_train_000001.bin", "fineweb_train_000002.bin"):
        assert_same_file(local_shard(tmp_path, name), remote_shard(data_hub, name))
    assert report.counts["replaced"] == 1 and report.counts["downloaded"] == 2
    assert any("existing file is invalid" in m and "fineweb_train_000001.bin" in m for m in messages)
    assert temp_files(tmp_path / "data") == []


def test_corrupt_remote_shard_is_refused(tmp_path, data_hub):
    name = "fineweb_train_000001.bin"
    good = remote_shard(data_hub, name).read_bytes()
    remote_shard(data_hub, name).write_bytes(good[:-10])  # size no longer matches the header
    with pytest.raises(DownloadError) as caught:
        run_download(data_hub, tmp_path, 3)
    message = str(caught.value)
    assert "refusing corrupt download" in message and name in message
    assert "does not match the header's token count" in message
    assert data_hub.gets().count(f"{SHARDS_REMOTE}/{name}") == 2  # retried once, bypassing the cache
    assert not local_shard(tmp_path, name).exists() and temp_files(tmp_path / "data") == []
    first = "fineweb_train_000000.bin"
    assert_same_file(local_shard(tmp_path, first), remote_shard(data_hub, first))

    remote_shard(data_hub, name).write_bytes(good)  # the hub is fixed: a re-run completes
    report, _ = run_download(data_hub, tmp_path, 3)
    val_files = remote_manifest(data_hub)["datasets"][0]["stats"]["files_val"]
    # train_000001, train_000002 and the two tokenizer files are new; val and train_000000 were kept.
    assert report.counts == {"downloaded": 4, "present": val_files + 1, "replaced": 0}
    assert_same_file(local_shard(tmp_path, name), remote_shard(data_hub, name))


def test_token_count_is_checked_against_the_manifest_when_it_has_one(tmp_path, data_hub):
    name = "fineweb_train_000000.bin"
    write_shard(remote_shard(data_hub, name), np.ones(100, dtype=np.uint16))  # well-formed, wrong content
    with pytest.raises(DownloadError, match="header says 100 tokens but the manifest expects"):
        run_download(data_hub, tmp_path, 1)
    write_remote_manifest(data_hub, minimal_manifest(data_hub))
    (tmp_path / "data" / "manifest.json").unlink()
    report, _ = run_download(data_hub, tmp_path, 1)  # without counts, header + size is all that can be checked
    assert report.shards_with_counts == 0 and read_shard(local_shard(tmp_path, name)).size == 100


def test_single_val_shard_is_checked_against_stats_tokens_val(tmp_path, data_hub):
    manifest = minimal_manifest(data_hub)
    stats = manifest["datasets"][1]["stats"]
    assert stats["files_val"] == 1
    val_tokens = read_shard(remote_shard(data_hub, "fineweb_val_000000.bin")).size
    stats["tokens_val"] = val_tokens + 1
    write_remote_manifest(data_hub, manifest)
    with pytest.raises(DownloadError, match=f"fineweb_val_000000.bin: header says {val_tokens} tokens"):
        run_download(data_hub, tmp_path, 0)
    stats["tokens_val"] = val_tokens
    write_remote_manifest(data_hub, manifest)
    (tmp_path / "data" / "manifest.json").unlink()
    report, _ = run_download(data_hub, tmp_path, 0)
    assert report.shards_with_counts == 1 and report.tokens_val == val_tokens and report.shards_train == 0


def test_token_ids_beyond_the_vocab_are_refused(tmp_path, data_hub):
    write_remote_manifest(data_hub, minimal_manifest(data_hub))
    write_shard(remote_shard(data_hub, "fineweb_train_000000.bin"), np.array([1, 5, 1500], dtype=np.uint16))
    with pytest.raises(DownloadError, match="token id 1500 at position 2 is outside the vocabulary"):
        run_download(data_hub, tmp_path, 1)


@pytest.mark.parametrize(
    "change, train_shards, expected",
    [
        (None, 99, "has only"),
        (None, -1, "train shards must be >= 0"),
        ("drop_dataset", 1, f"(from {REPO_ID} (remote root 'datasets')) has no dataset fineweb10B_sp1024 for "
                            "--variant sp1024; its variants: other."),
        ("drop_tokenizer", 1, "no tokenizer named"),
        ("escape_path", 1, "not a plain relative path"),
        ("missing_file", 3, "no such file on the hub"),
    ],
)
def test_manifest_and_hub_problems_are_named_errors(tmp_path, data_hub, change, train_shards, expected):
    manifest = minimal_manifest(data_hub)
    if change == "drop_dataset":
        manifest["datasets"].pop()
    elif change == "drop_tokenizer":
        manifest["tokenizers"] = []
    elif change == "escape_path":
        manifest["tokenizers"][0]["vocab_path"] = "../../outside.vocab"
    elif change == "missing_file":
        remote_shard(data_hub, "fineweb_train_000002.bin").unlink()
    write_remote_manifest(data_hub, manifest)
    with pytest.raises(DownloadError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        run_download(data_hub, tmp_path, train_shards)


def test_wrong_repo_and_skip_manifest_errors(tmp_path, data_hub):
    source = HubSource("someone/else", ROOT, endpoint=data_hub.url, cache_dir=tmp_path / "cache")
    with pytest.raises(DownloadError, match="dataset repo someone/else not found"):
        download("sp1024", 1, source, tmp_path / "data", log=lambda m: None)
    with pytest.raises(DownloadError, match="--skip-manifest"):
        run_download(data_hub, tmp_path, 1, skip_manifest=True)
    with pytest.raises(DownloadError, match="unknown variant"):
        download("gpt2", 1, source, tmp_path / "data", log=lambda m: None)


# ---- a dataset and its tokenizer stay paired ----------------------------------------------------------


def test_dataset_manifest_records_the_downloaded_tokenizer_sha256(tmp_path, data_hub):
    write_remote_manifest(data_hub, minimal_manifest(data_hub))  # like the challenge's: no sha256 anywhere
    report, messages = run_download(data_hub, tmp_path, 1)
    dataset_dir = tmp_path / "data" / "datasets" / DATASET
    model = tmp_path / "data" / "tokenizers" / "fineweb_1024_bpe.model"
    sha, detail = expected_tokenizer_sha256(dataset_dir)
    assert sha == hashlib.sha256(model.read_bytes()).hexdigest() == report.tokenizer_sha256
    assert "fineweb_1024_bpe" in detail
    manifest = json.loads((dataset_dir / "manifest.json").read_text())
    assert manifest["datasets"][0]["name"] == DATASET and manifest["tokenizers"][0]["vocab_size"] == 1024
    assert manifest["created_by"] == "data/cached_challenge_fineweb.py"
    assert (manifest["source"]["repo_id"], manifest["source"]["remote_root"]) == (REPO_ID, ROOT)
    assert any(f"wrote {dataset_dir / 'manifest.json'}" == m for m in messages)


def build_locally(data_dir: Path, inputs, tokenizer=None, tokenizer_out=None, dataset=DATASET, **overrides):
    values = dict(inputs=tuple(inputs), out_dir=data_dir / "datasets" / dataset, tokenizer=tokenizer,
                  tokenizer_out=tokenizer_out or data_dir / "tokenizers" / "fineweb_1024_bpe.model", val_docs=50)
    values.update(overrides)
    return build_shards(BuildConfig(**values), log=lambda message: None)


def test_the_bundled_sample_build_at_the_default_path_is_replaced(tmp_path, data_hub, data_slice_jsonl):
    data_dir = tmp_path / "data"
    build_locally(data_dir, [DATA_SAMPLE_PATH], val_docs=200, workers=2)  # what run.sh does first
    sample_dir = data_dir / "datasets" / DATASET
    sample_files = {path.name: path.read_bytes() for path in sample_dir.iterdir()}
    sample_train = read_shard(local_shard(tmp_path, "fineweb_train_000000.bin"))

    # While another dataset uses the sample's tokenizer, the download is refused and changes nothing.
    sample_model = data_dir / "tokenizers" / "fineweb_1024_bpe.model"
    build_locally(data_dir, [data_slice_jsonl], sample_model, dataset="mine_sp1024")
    with pytest.raises(DownloadError, match=f"it is the tokenizer of {data_dir / 'datasets' / 'mine_sp1024'}"):
        run_download(data_hub, tmp_path, 1)
    assert {path.name: path.read_bytes() for path in sample_dir.iterdir()} == sample_files
    shutil.rmtree(data_dir / "datasets" / "mine_sp1024")

    report, messages = run_download(data_hub, tmp_path, 1)
    assert any(m.startswith(f"replacing the bundled-sample build in {data_dir / 'datasets' / DATASET}")
               for m in messages)
    # Without the replacement the sample's train shard (valid format, not in the manifest) would be kept.
    local_train = local_shard(tmp_path, "fineweb_train_000000.bin")
    assert_same_file(local_train, remote_shard(data_hub, "fineweb_train_000000.bin"))
    assert read_shard(local_train).size != sample_train.size
    assert list_shards(data_dir / "datasets" / DATASET, "train") == [local_train]
    # The sample's tokenizer is no dataset's any more: replaced by the hub's.
    for suffix in (".model", ".vocab"):
        assert_same_file(data_dir / "tokenizers" / f"fineweb_1024_bpe{suffix}",
                         data_hub.directory / ROOT / "tokenizers" / f"fineweb_1024_bpe{suffix}")
    assert any("replacing" in m and "fineweb_1024_bpe.model" in m for m in messages)
    assert expected_tokenizer_sha256(data_dir / "datasets" / DATASET)[0] == report.tokenizer_sha256


def test_another_dataset_in_the_dataset_folder_is_refused(tmp_path, data_hub, data_slice_jsonl, data_tokenizer):
    data_dir = tmp_path / "data"
    build_locally(data_dir, [data_slice_jsonl], data_tokenizer)  # the user's own build at the challenge's path
    before = {path: path.read_bytes() for path in (data_dir / "datasets" / DATASET).iterdir()}
    with pytest.raises(DownloadError) as caught:
        run_download(data_hub, tmp_path, 1)
    message = str(caught.value)
    assert f"{data_dir / 'datasets' / DATASET} already holds another dataset" in message
    assert "built by data/build_shards.py from slice.jsonl" in message and "Move that folder away" in message
    assert {path: path.read_bytes() for path in (data_dir / "datasets" / DATASET).iterdir()} == before
    assert data_hub.gets() == [f"{ROOT}/manifest.json"]  # refused before any shard was fetched


def test_a_present_tokenizer_of_another_dataset_is_refused_and_an_orphan_replaced(
    tmp_path, data_hub, data_slice_jsonl, data_sample_docs
):
    from data.sp_tokenizer import save_tokenizer, train_tokenizer

    write_remote_manifest(data_hub, minimal_manifest(data_hub))  # no sha256: compared with the hub's file
    data_dir = tmp_path / "data"
    model = data_dir / "tokenizers" / "fineweb_1024_bpe.model"
    save_tokenizer(train_tokenizer(data_sample_docs[:300], 1024), model)  # not the hub's tokenizer
    build_locally(data_dir, [data_slice_jsonl], model, dataset="mine_sp1024")  # ...and mine_sp1024 is made with it
    with pytest.raises(DownloadError) as caught:
        run_download(data_hub, tmp_path, 1)
    message = str(caught.value)
    assert f"{model} is not the tokenizer of {REPO_ID}" in message
    assert f"it is the tokenizer of {data_dir / 'datasets' / 'mine_sp1024'}" in message
    assert not (data_dir / "datasets" / DATASET).exists()  # refused before any shard was fetched

    shutil.rmtree(data_dir / "datasets" / "mine_sp1024")  # now no dataset names it: replaced
    report, messages = run_download(data_hub, tmp_path, 1)
    assert_same_file(model, data_hub.directory / ROOT / "tokenizers" / "fineweb_1024_bpe.model")
    assert_same_file(model.with_suffix(".vocab"), data_hub.directory / ROOT / "tokenizers" / "fineweb_1024_bpe.vocab")
    assert any(m.startswith(f"replacing {model}: not the tokenizer of {REPO_ID}") for m in messages)

    data_hub.requests.clear()  # a re-run keeps it: the dataset's manifest recorded its sha256
    run_download(data_hub, tmp_path, 1)
    assert data_hub.gets() == []


def test_a_manifest_of_unrecorded_origin_is_fetched_again_unless_skip_manifest(tmp_path, data_hub):
    run_download(data_hub, tmp_path, 0)
    (tmp_path / "data" / "manifest.source.json").unlink()  # as an earlier version of the downloader left it
    data_hub.requests.clear()
    _, messages = run_download(data_hub, tmp_path, 0, skip_manifest=True)
    assert data_hub.requests == []
    assert any("where it came from was not recorded" in m for m in messages)
    _, messages = run_download(data_hub, tmp_path, 0)
    assert data_hub.requests == [("HEAD", f"{ROOT}/manifest.json")]  # asked again (the hub cache has its body)
    assert any(f"came from an unrecorded repo; fetching {REPO_ID}" in m for m in messages)


# ---- command line (subprocess: HF_ENDPOINT and the env overrides are read as a user's run reads them) ------


def cli_env(hub, tmp_path, **extra):
    env = {key: value for key, value in os.environ.items() if not key.startswith(("HF_", "HUGGINGFACE", "MATCHED_"))}
    env.update(
        HF_ENDPOINT=hub.url,
        HF_HOME=str(tmp_path / "hf_home"),
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HUB_DISABLE_TELEMETRY="1",
        MATCHED_FINEWEB_REPO_ID=REPO_ID,
        MATCHED_FINEWEB_REMOTE_ROOT_PREFIX=ROOT,
    )
    env.update(extra)
    return env


def cli_args(tmp_path, *args):
    return [sys.executable, str(SCRIPT), *args, "--data-dir", str(tmp_path / "data")]


def test_cli_resumes_after_being_killed_mid_download(tmp_path, data_hub):
    data_hub.stall = f"{SHARDS_REMOTE}/fineweb_train_000001.bin"
    args = cli_args(tmp_path, "--variant", "sp1024", "--train-shards", "1", "3")  # positional 3 overrides
    process = subprocess.Popen(args, env=cli_env(data_hub, tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert data_hub.stalled.wait(60), "the download never reached the stalled shard"
    finally:
        process.kill()
        process.communicate()
    data_hub.release.set()
    # Finished files are complete; the interrupted one is absent, not partial.
    first = "fineweb_train_000000.bin"
    assert_same_file(local_shard(tmp_path, first), remote_shard(data_hub, first))
    assert not local_shard(tmp_path, "fineweb_train_000001.bin").exists()
    assert temp_files(tmp_path / "data") == []

    data_hub.requests.clear()
    result = subprocess.run(args, env=cli_env(data_hub, tmp_path), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    fetched = [path.rsplit("/", 1)[1] for path in data_hub.gets()]
    assert fetched == ["fineweb_train_000001.bin", "fineweb_train_000002.bin",
                       "fineweb_1024_bpe.model", "fineweb_1024_bpe.vocab"]
    for path in list_shards(data_hub.directory / SHARDS_REMOTE, "val") + [
        remote_shard(data_hub, f"fineweb_train_{i:06d}.bin") for i in range(3)
    ]:
        assert_same_file(local_shard(tmp_path, path.name), path)
    assert "already present and valid" in result.stdout and "TOKENIZER_PATH=" in result.stdout


def test_cli_unreachable_hub_says_what_to_do(tmp_path, data_hub):
    result = subprocess.run(
        cli_args(tmp_path, "--train-shards", "1"), env=cli_env(data_hub, tmp_path, HF_HUB_OFFLINE="1"),
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cached_challenge_fineweb: error: ")
    assert "HF_HUB_OFFLINE" in lines[0] and "tools/py data/build_shards.py --sample" in lines[0]
    assert data_hub.requests == []


def test_cli_rejects_negative_shard_count(tmp_path, data_hub):
    result = subprocess.run(cli_args(tmp_path, "-3"), env=cli_env(data_hub, tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "train shards must be >= 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_sp8192_from_another_repo_after_a_manifest_of_the_default_one(tmp_path, data_hub):
    """SPEC_0409 §0.2: a data/manifest.json of the default repo lacks sp8192; the SP8192 record's command
    (MATCHED_FINEWEB_REPO_ID=<its repo> ... --variant sp8192 --train-shards N) must still work."""
    first = subprocess.run(cli_args(tmp_path, "--variant", "sp1024", "--train-shards", "1"),
                           env=cli_env(data_hub, tmp_path), capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr

    # The variant is not in the default repo: the error names the repo, its variants and where sp8192 is.
    missing = subprocess.run(cli_args(tmp_path, "--variant", "sp8192", "--train-shards", "3"),
                             env=cli_env(data_hub, tmp_path), capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "Traceback" not in missing.stderr
    assert f"(from {REPO_ID} (remote root 'datasets')) has no dataset fineweb10B_sp8192" in missing.stderr
    assert "its variants: sp1024." in missing.stderr
    assert "MATCHED_FINEWEB_REPO_ID=kevclark/parameter-golf" in missing.stderr

    env = cli_env(data_hub, tmp_path, MATCHED_FINEWEB_REPO_ID=SP8192_REPO_ID)
    result = subprocess.run(cli_args(tmp_path, "--variant", "sp8192", "--train-shards", "3"), env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert f"came from {REPO_ID} (remote root 'datasets'); fetching {SP8192_REPO_ID}" in result.stdout
    remote = tmp_path / "remote_8192" / ROOT
    data_dir = tmp_path / "data"
    dataset_dir = data_dir / "datasets" / "fineweb10B_sp8192"
    for name in ["fineweb_val_000000.bin"] + [f"fineweb_train_{i:06d}.bin" for i in range(3)]:
        assert_same_file(dataset_dir / name, remote / "datasets" / "fineweb10B_sp8192" / name)
    model = data_dir / "tokenizers" / "fineweb_8192_bpe.model"
    assert_same_file(model, remote / "tokenizers" / "fineweb_8192_bpe.model")
    assert expected_tokenizer_sha256(dataset_dir)[0] == hashlib.sha256(model.read_bytes()).hexdigest()
    assert f"train with DATA_PATH={dataset_dir} TOKENIZER_PATH={model}" in result.stdout
    assert json.loads((data_dir / "manifest.source.json").read_text())["repo_id"] == SP8192_REPO_ID
    # The sp1024 download from the first repo is untouched and still paired with its tokenizer.
    sp1024 = data_dir / "datasets" / DATASET
    assert expected_tokenizer_sha256(sp1024)[0] == hashlib.sha256(
        (data_dir / "tokenizers" / "fineweb_1024_bpe.model").read_bytes()).hexdigest()

    # --skip-manifest with a manifest of another repo than the one asked for is refused, naming both.
    skip = subprocess.run(cli_args(tmp_path, "--variant", "sp1024", "--train-shards", "1", "--skip-manifest"),
                          env=cli_env(data_hub, tmp_path), capture_output=True, text=True, timeout=120)
    assert skip.returncode == 1 and "Traceback" not in skip.stderr
    assert f"came from {SP8192_REPO_ID}" in skip.stderr and f"now name {REPO_ID}" in skip.stderr
    assert "run without --skip-manifest" in skip.stderr
