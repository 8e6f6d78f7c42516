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

from test_data_fixtures import data_sample_docs, data_slice_jsonl, data_tokenizer  # noqa: F401  (fixtures)
from data.build_shards import BuildConfig, build_shards
from data.cached_challenge_fineweb import DownloadError, HubSource, download, summary_lines
from data.shards import list_shards, read_shard, write_shard

REPO_ROOT = Path(__file__).resolve().parent.parent
SCRIPT = REPO_ROOT / "data" / "cached_challenge_fineweb.py"
REPO_ID = "test-owner/parameter-golf"
ROOT = "datasets"
DATASET = "fineweb10B_sp1024"
SHARDS_REMOTE = f"{ROOT}/datasets/{DATASET}"


class FakeHub:
    """Serves `directory` as dataset repo REPO_ID at revision main, on 127.0.0.1 only. Records requests.
    If `stall` names a file, its first GET sends half the body and then waits until `release` is set."""

    def __init__(self, directory: Path):
        self.directory = directory
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

    def commit(self) -> str:
        """Like a git commit id: changes whenever any file of the repo changes (path, size, mtime)."""
        listing = sorted(
            (str(path.relative_to(self.directory)), path.stat().st_size, path.stat().st_mtime_ns)
            for path in self.directory.rglob("*") if path.is_file()
        )
        return hashlib.sha1(repr(listing).encode()).hexdigest()

    def gets(self) -> list:
        return [path for method, path in self.requests if method == "GET"]

    def respond(self, handler, send_body: bool) -> None:
        prefix = f"/datasets/{REPO_ID}/resolve/main/"
        path = unquote(handler.path)
        if not path.startswith(prefix):
            error = "RepoNotFound" if "/resolve/" in path else None
            return self.not_found(handler, error)
        relative = path[len(prefix):]
        self.requests.append((handler.command, relative))
        file = self.directory / relative
        if not file.is_file():
            return self.not_found(handler, "EntryNotFound")
        data = file.read_bytes()
        handler.send_response(200)
        handler.send_header("Content-Length", str(len(data)))
        handler.send_header("ETag", f'"{hashlib.sha256(data).hexdigest()}"')
        handler.send_header("X-Repo-Commit", self.commit())
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


@pytest.fixture(scope="module")
def data_pristine_remote(tmp_path_factory, data_slice_jsonl, data_tokenizer):
    """A remote tree in the challenge layout, built by our builder: <root>/manifest.json,
    <root>/datasets/fineweb10B_sp1024/*.bin, <root>/tokenizers/fineweb_1024_bpe.{model,vocab}."""
    remote = tmp_path_factory.mktemp("data_remote")
    tokenizers = remote / ROOT / "tokenizers"
    tokenizers.mkdir(parents=True)
    for suffix in (".model", ".vocab"):
        shutil.copy(data_tokenizer.with_suffix(suffix), tokenizers / f"fineweb_1024_bpe{suffix}")
    out_dir = remote / SHARDS_REMOTE
    build_shards(
        BuildConfig(
            inputs=(data_slice_jsonl,), out_dir=out_dir, tokenizer_out=tokenizers / "unused.model",
            tokenizer=tokenizers / "fineweb_1024_bpe.model", val_docs=50, shard_size=40_000,
        ),
        log=lambda message: None,
    )
    os.replace(out_dir / "manifest.json", remote / ROOT / "manifest.json")
    return remote


@pytest.fixture
def data_hub(tmp_path, data_pristine_remote):
    """A fresh copy of the remote (tests may damage it) served by a FakeHub."""
    remote = tmp_path / "remote"
    shutil.copytree(data_pristine_remote, remote)
    hub = FakeHub(remote)
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
    assert "HF_HUB_OFFLINE" in lines[0] and "python3 data/build_shards.py --sample" in lines[0]
    assert data_hub.requests == []


def test_cli_rejects_negative_shard_count(tmp_path, data_hub):
    result = subprocess.run(cli_args(tmp_path, "-3"), env=cli_env(data_hub, tmp_path),
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 1 and "train shards must be >= 0" in result.stderr
    assert "Traceback" not in result.stderr
