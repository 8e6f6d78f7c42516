#!/usr/bin/env python3
"""Download the challenge's pre-tokenized FineWeb shards and tokenizer from the Hugging Face hub.

  tools/py data/cached_challenge_fineweb.py --variant sp1024 --train-shards 80      # 2026-03-23 record
  MATCHED_FINEWEB_REPO_ID=kevclark/parameter-golf \
      tools/py data/cached_challenge_fineweb.py --variant sp8192 --train-shards 128   # 2026-04-09 record
  tools/py data/cached_challenge_fineweb.py 10            # positional count overrides --train-shards
  MATCHED_FINEWEB_REPO_ID=romeerp/parameter-golf-caseops-v1 tools/py data/cached_challenge_fineweb.py \
      --variant sp8192_lossless_caps_caseops_v1_reserved --train-shards 80             # 2026-04-27 record

Source: dataset repo MATCHED_FINEWEB_REPO_ID (default willdepueoai/parameter-golf), under the remote
root MATCHED_FINEWEB_REMOTE_ROOT_PREFIX (default `datasets`); HF_ENDPOINT picks another hub or mirror.
The remote root is stripped locally: `<root>/datasets/...` -> data/datasets/..., `<root>/tokenizers/...`
-> data/tokenizers/..., `<root>/manifest.json` -> data/manifest.json.

Manifest driven: the `datasets[]` entry named fineweb10B_<variant> gives the shard counts
(stats.files_val, stats.files_train) and tokenizer_name; the `tokenizers[]` entry of that name lists the
tokenizer files (model_path, vocab_path, path). Order: manifest, val shards, train shards, tokenizer.
data/manifest.source.json records the repo and remote root data/manifest.json came from; a manifest of
another source is fetched again (one of the default repo lacks sp8192).

A dataset and its tokenizer stay paired: data/datasets/<name>/manifest.json (written last) records the
sha256 of the downloaded .model; a dataset folder holding another dataset is refused (the bundled-sample
build at the default path is replaced), and so is a tokenizer file that another local dataset names.

Each file is fetched into the hub cache with hf_hub_download, hard-linked (or copied) to a temp name
next to its destination, verified, and renamed into place, so a destination file is always complete.
Shards are verified by header and size, and by token count (and sha256) when the manifest has per-shard
entries; a file already present is skipped only if it passes the same checks. Re-running the command
after an interruption downloads only what is missing or invalid.

A CaseOps variant (sp<V>_lossless_caps_caseops_v1_reserved, SPEC_0427 §2) also fetches each val shard's byte
sidecar fineweb_val_bytes_NNNNNN.bin (checked to have one entry per token of its shard), checks that the
tokenizer has the CaseOps operators as pieces, and records text_transform and the sidecars' byte total
(stats.bytes_val) in the dataset manifest, which the trainer checks at start-up.
"""

import argparse
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

if __package__ in (None, ""):
    # Run as `python3 data/cached_challenge_fineweb.py`: import the `data` package from the repo root,
    # and drop data/ itself from the path so its datasets/ and tokenizers/ never shadow real packages.
    _SCRIPT_DIR = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [entry for entry in sys.path if os.path.abspath(entry or os.curdir) != _SCRIPT_DIR]
    sys.path.insert(0, os.path.dirname(_SCRIPT_DIR))
if __name__ == "__main__":
    from data.environment import require_modules

    require_modules(
        "cached_challenge_fineweb", "data/cached_challenge_fineweb.py", ("huggingface_hub", "numpy", "sentencepiece")
    )

import numpy as np

from data import caseops
from data.fileio import atomic_write_bytes, sha256_file, stale_temporaries, temporary_path_for
from data.manifest import MANIFEST_NAME, datasets_using_tokenizer, expected_tokenizer_sha256
from data.shards import (
    ShardFormatError,
    list_shards,
    list_sidecars,
    read_header,
    read_shard,
    shard_name,
    sidecar_name,
    verify_shard,
)

DEFAULT_REPO_ID = "willdepueoai/parameter-golf"
DEFAULT_REMOTE_ROOT = "datasets"
DEFAULT_VARIANT = "sp1024"
DEFAULT_TRAIN_SHARDS = 80
DATA_DIR = Path(__file__).resolve().parent
SAMPLE_PATH = DATA_DIR / "sample" / "tiny.jsonl.xz"
MANIFEST_SOURCE_NAME = "manifest.source.json"  # beside data/manifest.json: the repo and remote root it came from
DOWNLOADER_NAME = "data/cached_challenge_fineweb.py"
BUILDER_NAME = "data/build_shards.py"
DATASET_MANIFEST_FORMAT_VERSION = 1
CASEOPS_SUFFIX = "_lossless_caps_caseops_v1_reserved"
# Variants whose records' data is not in the default repo (SPEC_0409 §2, SPEC_0427 §2).
KNOWN_VARIANT_REPOS = {"sp8192": "kevclark/parameter-golf",
                       "sp8192" + CASEOPS_SUFFIX: "romeerp/parameter-golf-caseops-v1"}
DOCS_FILES = ("docs_selected.jsonl", "docs_selected.source_manifest.json")
VARIANT_PATTERN = re.compile(r"sp(\d+)(?:%s)?|byte260" % CASEOPS_SUFFIX)
TOKENIZER_ARTIFACT_KEYS = ("model_path", "vocab_path", "path")
OFFLINE_HINT = (
    "Check the internet connection or proxy (HTTPS_PROXY), or set HF_ENDPOINT to a reachable hub mirror, "
    "then re-run: finished files are kept. With no internet, build shards from the bundled sample instead: "
    "tools/py data/build_shards.py --sample"
)


class DownloadError(RuntimeError):
    """A download that cannot go on: hub unreachable, file missing, manifest unusable, file corrupt."""


class VerificationError(ValueError):
    """A local or downloaded file does not match what the format and the manifest say it must be."""


@dataclass(frozen=True)
class HubSource:
    repo_id: str = DEFAULT_REPO_ID
    remote_root: str = DEFAULT_REMOTE_ROOT
    endpoint: str | None = None  # None: huggingface_hub's default (HF_ENDPOINT, else huggingface.co)
    cache_dir: Path | None = None  # None: the default hub cache (HF_HOME / HF_HUB_CACHE)

    @classmethod
    def from_environ(cls, environ) -> "HubSource":
        return cls(
            repo_id=environ.get("MATCHED_FINEWEB_REPO_ID") or DEFAULT_REPO_ID,
            remote_root=environ.get("MATCHED_FINEWEB_REMOTE_ROOT_PREFIX", DEFAULT_REMOTE_ROOT).strip("/"),
        )

    def origin(self) -> dict:
        """What identifies the manifest this source serves (a mirror endpoint serves the same one)."""
        return {"repo_id": self.repo_id, "remote_root": self.remote_root}

    def describe(self) -> str:
        return describe_origin(self.origin())

    def remote_path(self, relative: str) -> str:
        return "/".join(part for part in (self.remote_root, relative) if part)

    def endpoint_name(self) -> str:
        if self.endpoint:
            return self.endpoint
        from huggingface_hub import constants

        return constants.ENDPOINT


@dataclass(frozen=True)
class PlannedFile:
    """One file to fetch: its path under the remote root, and what to verify it against."""

    relative: str
    kind: str  # "shard", "sidecar" (a CaseOps val byte sidecar), "tokenizer_model" or "file"
    expected_tokens: int | None = None
    expected_bytes: int | None = None
    expected_sha256: str | None = None


class HubFetcher:
    """Fetches one file of the dataset repo into the hub cache; turns hub errors into DownloadError."""

    def __init__(self, source: HubSource):
        self.source = source

    def __call__(self, relative: str, force: bool = False) -> Path:
        from huggingface_hub import errors, hf_hub_download

        # Older huggingface_hub releases name the remote 404 EntryNotFoundError; LocalEntryNotFoundError
        # subclasses it there, so it is caught first below.
        remote_not_found = getattr(errors, "RemoteEntryNotFoundError", errors.EntryNotFoundError)

        remote = self.source.remote_path(relative)
        folder, _, name = remote.rpartition("/")
        where = f"{self.source.repo_id}/{remote} on {self.source.endpoint_name()}"
        try:
            return Path(
                hf_hub_download(
                    repo_id=self.source.repo_id,
                    filename=name,
                    subfolder=folder or None,
                    repo_type="dataset",
                    endpoint=self.source.endpoint,
                    cache_dir=self.source.cache_dir,
                    force_download=force,
                )
            )
        except errors.LocalEntryNotFoundError as error:
            if isinstance(error.__cause__, errors.OfflineModeIsEnabled):
                raise DownloadError(
                    f"cannot fetch {where}: HF_HUB_OFFLINE is set. Unset it, or: {OFFLINE_HINT}"
                ) from error
            cause = error.__cause__ or error
            raise DownloadError(f"cannot reach the hub for {where} ({cause}). {OFFLINE_HINT}") from error
        except errors.RepositoryNotFoundError as error:
            raise DownloadError(
                f"dataset repo {self.source.repo_id} not found (or private/gated) on {self.source.endpoint_name()}; "
                "check MATCHED_FINEWEB_REPO_ID"
            ) from error
        except errors.RevisionNotFoundError as error:
            raise DownloadError(f"revision not found for {where}") from error
        except remote_not_found as error:
            raise DownloadError(
                f"{where}: no such file on the hub; check MATCHED_FINEWEB_REMOTE_ROOT_PREFIX "
                f"(now {self.source.remote_root!r}) and the manifest"
            ) from error
        except errors.HfHubHTTPError as error:
            raise DownloadError(f"{where}: hub error ({error}); re-run to retry, finished files are kept") from error
        except OSError as error:
            raise DownloadError(f"{where}: download failed ({error}); re-run to resume") from error
        except Exception as error:  # network errors of the HTTP client surface as its own exception types
            raise DownloadError(
                f"{where}: download failed ({type(error).__name__}: {error}); re-run to resume"
            ) from error


def describe_origin(origin) -> str:
    if origin is None:
        return "an unrecorded repo"
    return f"{origin['repo_id']} (remote root {origin['remote_root']!r})"


def read_origin(path: Path):
    """The {repo_id, remote_root} recorded in a manifest.source.json or a dataset manifest's `source`, or None."""
    try:
        recorded = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return _origin_of(recorded)


def _origin_of(recorded):
    if not isinstance(recorded, dict) or not all(isinstance(recorded.get(k), str) for k in ("repo_id", "remote_root")):
        return None
    return {"repo_id": recorded["repo_id"], "remote_root": recorded["remote_root"]}


def local_path(data_dir: Path, relative: str) -> Path:
    """Where a file under the remote root lives locally: the same relative path under data_dir."""
    parts = relative.split("/")
    if not relative or relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise DownloadError(f"manifest path {relative!r} is not a plain relative path")
    return Path(data_dir).joinpath(*parts)


def parse_variant(variant: str) -> str:
    if not VARIANT_PATTERN.fullmatch(variant):
        raise DownloadError(f"unknown variant {variant!r}: expected sp<digits> (e.g. sp1024), "
                            f"sp<digits>{CASEOPS_SUFFIX} or byte260")
    return f"fineweb10B_{variant}"


def load_manifest(path: Path) -> dict:
    try:
        manifest = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DownloadError(f"{path}: unreadable manifest ({error}); delete it and re-run to fetch it again") from error
    if not isinstance(manifest, dict):
        raise DownloadError(f"{path}: manifest is not a JSON object; delete it and re-run")
    return manifest


def _entry_named(entries, name: str, what: str, manifest_path: Path) -> dict:
    entries = entries if isinstance(entries, list) else []
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    names = sorted(str(entry.get("name")) for entry in entries if isinstance(entry, dict))
    raise DownloadError(f"{manifest_path}: no {what} named {name!r} (available: {', '.join(names) or 'none'})")


def _stat_int(stats: dict, key: str, manifest_path: Path, dataset: str) -> int:
    value = stats.get(key)
    if not isinstance(value, int) or value < 0:
        raise DownloadError(f"{manifest_path}: dataset {dataset} has no valid stats.{key} (got {value!r})")
    return value


def _shard_expectations(entry: dict, files_val: int) -> dict:
    """Per-shard expectations by file name: from a `shards` list when the manifest has one (our builder
    writes it), else the val token total when there is a single val shard. The challenge's manifest may
    have neither; then shards are checked by header and size only."""
    expectations = {}
    for shard in entry.get("shards") or []:
        if isinstance(shard, dict) and isinstance(shard.get("name"), str):
            expectations[shard["name"]] = shard
    val_tokens = (entry.get("stats") or {}).get("tokens_val")
    first_val = shard_name("val", 0)
    if files_val == 1 and isinstance(val_tokens, int) and first_val not in expectations:
        expectations[first_val] = {"tokens": val_tokens}
    return expectations


def dataset_entry(manifest: dict, manifest_path: Path, variant: str, origin: str) -> dict:
    """The manifest's datasets[] entry for `variant`; a missing one is an error naming the repo and listing
    the variants the manifest has."""
    dataset_name = parse_variant(variant)
    entries = [entry for entry in manifest.get("datasets") or [] if isinstance(entry, dict)]
    for entry in entries:
        if entry.get("name") == dataset_name:
            return entry
    prefix = "fineweb10B_"
    names = sorted(str(entry.get("name")) for entry in entries)
    variants = [name[len(prefix):] if name.startswith(prefix) else name for name in names]
    hint = ""
    if variant in KNOWN_VARIANT_REPOS and not origin.startswith(KNOWN_VARIANT_REPOS[variant] + " "):
        known = KNOWN_VARIANT_REPOS[variant]
        hint = f" The records' {variant} data is in another repo: MATCHED_FINEWEB_REPO_ID={known}"
    raise DownloadError(
        f"{manifest_path} (from {origin}) has no dataset {dataset_name} for --variant {variant}; "
        f"its variants: {', '.join(variants) or 'none'}.{hint}"
    )


def tokenizer_entry_for(manifest: dict, manifest_path: Path, entry: dict) -> dict:
    return _entry_named(manifest.get("tokenizers"), entry.get("tokenizer_name"), "tokenizer", manifest_path)


def plan_downloads(entry: dict, tokenizer: dict, manifest_path: Path, train_shards: int, with_docs: bool) -> list:
    """The files to fetch, in order, for one datasets[] entry and its tokenizers[] entry."""
    dataset_name = entry["name"]
    stats = entry.get("stats") if isinstance(entry.get("stats"), dict) else {}
    files_train = _stat_int(stats, "files_train", manifest_path, dataset_name)
    files_val = _stat_int(stats, "files_val", manifest_path, dataset_name)
    if train_shards > files_train:
        raise DownloadError(f"{dataset_name} has only {files_train} train shards; asked for {train_shards}")
    artifacts = [tokenizer[key] for key in TOKENIZER_ARTIFACT_KEYS if isinstance(tokenizer.get(key), str)]
    if not artifacts:
        raise DownloadError(f"{manifest_path}: tokenizer {tokenizer.get('name')!r} lists no files")

    expectations = _shard_expectations(entry, files_val)
    names = [shard_name("val", i) for i in range(files_val)] + [shard_name("train", i) for i in range(train_shards)]
    if dataset_name.endswith(CASEOPS_SUFFIX):
        names[files_val:files_val] = [sidecar_name(i) for i in range(files_val)]
    plan = []
    for name in names:
        expected = expectations.get(name, {})
        plan.append(
            PlannedFile(
                f"datasets/{dataset_name}/{name}",
                "sidecar" if name.startswith("fineweb_val_bytes_") else "shard",
                expected.get("tokens"),
                expected.get("bytes"),
                expected.get("sha256"),
            )
        )
    tokenizer_sha256 = tokenizer.get("sha256")
    for artifact in artifacts:
        is_model = artifact.endswith(".model")
        plan.append(PlannedFile(artifact, "tokenizer_model" if is_model else "file", None, None,
                                tokenizer_sha256 if is_model else None))
    if with_docs:
        plan.extend(PlannedFile(name, "file") for name in DOCS_FILES)
    return plan


def variant_vocab_size(variant: str) -> int:
    return 260 if variant == "byte260" else int(VARIANT_PATTERN.fullmatch(variant).group(1))


def verify_file(path: Path, planned: PlannedFile, variant: str, label: str, thorough: bool):
    """Raise VerificationError if `path` is not a valid copy of `planned`; return its token count (shards).

    Always: size, shard header/size/token count, tokenizer loads with the variant's vocab size. With
    `thorough` (fresh downloads) also: every token id < vocab size, and sha256 where the manifest has one.
    Files already present get the cheap checks only, so re-runs over many GB stay fast.
    """
    tokens = None
    if planned.kind in ("shard", "sidecar"):
        vocab_size = variant_vocab_size(variant) if thorough and planned.kind == "shard" else None
        try:
            tokens = verify_shard(path, planned.expected_tokens, vocab_size, label=label).num_tokens
        except ShardFormatError as error:
            raise VerificationError(str(error)) from error
    elif planned.kind == "tokenizer_model":
        _verify_tokenizer_model(path, variant, label)
    size = path.stat().st_size
    if planned.expected_bytes is not None and size != planned.expected_bytes:
        raise VerificationError(f"{label}: {size} bytes, the manifest expects {planned.expected_bytes}")
    if thorough and planned.expected_sha256 is not None and sha256_file(path) != planned.expected_sha256:
        raise VerificationError(f"{label}: sha256 does not match the manifest")
    return tokens


def _verify_tokenizer_model(path: Path, variant: str, label: str) -> None:
    import sentencepiece as spm

    try:
        processor = spm.SentencePieceProcessor(model_file=str(path))
    except (RuntimeError, OSError) as error:
        raise VerificationError(f"{label}: not a SentencePiece model ({error})") from error
    if processor.vocab_size() != variant_vocab_size(variant):
        raise VerificationError(
            f"{label}: vocab size {processor.vocab_size()}, expected {variant_vocab_size(variant)} for {variant}"
        )
    if variant.endswith(CASEOPS_SUFFIX) and not caseops.is_caseops_tokenizer(processor):
        raise VerificationError(f"{label}: not a CaseOps tokenizer (no pieces U+E001-U+E004), as {variant} needs")


def place_verified(cached: Path, destination: Path, planned: PlannedFile, variant: str, label: str):
    """Link (or copy) the cached blob to a temp name beside `destination`, verify it, rename it in."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_path_for(destination)
    temporary.unlink(missing_ok=True)
    try:
        source = cached.resolve(strict=True)
        try:
            os.link(source, temporary)
        except OSError:
            shutil.copyfile(source, temporary)
        tokens = verify_file(temporary, planned, variant, label, thorough=True)
        os.replace(temporary, destination)
        return tokens
    finally:
        temporary.unlink(missing_ok=True)


class Downloader:
    def __init__(self, source: HubSource, data_dir: Path, fetch=None, log=print):
        self.source = source
        self.data_dir = Path(data_dir)
        self.fetch = fetch or HubFetcher(source)
        self.log = log
        self.counts = {"downloaded": 0, "present": 0, "replaced": 0}

    def get_manifest(self, skip_download: bool):
        """data/manifest.json, fetched unless the local one came from this source (recorded beside it in
        manifest.source.json): a manifest of another repo may lack the variant or describe other shards.
        Returns (path, a description of where it came from)."""
        path = local_path(self.data_dir, MANIFEST_NAME)
        origin_path = local_path(self.data_dir, MANIFEST_SOURCE_NAME)
        recorded = read_origin(origin_path)
        wanted = self.source.origin()
        if path.is_file():
            if recorded == wanted:
                self.log(f"manifest: using {path} (from {self.source.describe()})")
                return path, self.source.describe()
            if skip_download:
                if recorded is None:
                    self.log(f"manifest: using {path} as --skip-manifest asks (where it came from was not recorded)")
                    return path, "an unrecorded repo"
                raise DownloadError(
                    f"{path} came from {describe_origin(recorded)}, but MATCHED_FINEWEB_REPO_ID / "
                    f"MATCHED_FINEWEB_REMOTE_ROOT_PREFIX now name {self.source.describe()}; run without "
                    "--skip-manifest to fetch that repo's manifest"
                )
            self.log(f"manifest: {path} came from {describe_origin(recorded)}; fetching {self.source.describe()}'s")
        elif skip_download:
            raise DownloadError(f"{path} not found and --skip-manifest was given; run once without it")
        origin_path.unlink(missing_ok=True)  # never a record that names the wrong manifest, even if killed here
        cached = self.fetch(MANIFEST_NAME)
        atomic_write_bytes(path, Path(cached).read_bytes())
        record = dict(wanted, endpoint=self.source.endpoint_name())
        atomic_write_bytes(origin_path, (json.dumps(record, indent=2, sort_keys=True) + "\n").encode("utf-8"))
        self.log(f"manifest: fetched {self.source.remote_path(MANIFEST_NAME)} from {self.source.describe()}")
        return path, self.source.describe()

    def holds_sample_build(self, dataset_dir: Path) -> bool:
        """Never mix two datasets' files in one folder: a dataset dir that holds another dataset (another
        repo's download, or a build_shards.py build) is refused. True for the one exception, the
        bundled-sample build, which only stands in for the challenge's data at the trainer's default path
        and is rebuilt in seconds (remove_sample_build)."""
        local = _read_json(dataset_dir / MANIFEST_NAME)
        if local is None:
            return False  # nothing there, or files of an earlier download that wrote no manifest: verified one by one
        if local.get("created_by") == DOWNLOADER_NAME and _origin_of(local.get("source")) == self.source.origin():
            return False
        if _is_bundled_sample_build(local):
            return True
        if local.get("created_by") == DOWNLOADER_NAME:
            what = f"downloaded from {describe_origin(_origin_of(local.get('source')))}"
        else:
            names = [str(source.get("name")) for source in _first_dataset(local).get("sources") or []
                     if isinstance(source, dict)]
            what = f"built by {local.get('created_by', 'an unknown tool')}"
            if names:
                what += f" from {', '.join(names)}"
        raise DownloadError(
            f"{dataset_dir} already holds another dataset ({what}); downloading {self.source.describe()}'s "
            "files into it would mix the two. Move that folder away (or delete it), then re-run"
        )

    def remove_sample_build(self, dataset_dir: Path) -> None:
        shards = list_shards(dataset_dir, "val") + list_shards(dataset_dir, "train") + list_sidecars(dataset_dir)
        self.log(f"replacing the bundled-sample build in {dataset_dir} ({len(shards)} shards; "
                 "rebuild it elsewhere with: tools/py data/build_shards.py --out-dir DIR)")
        (dataset_dir / MANIFEST_NAME).unlink()
        for shard in shards:
            shard.unlink()

    def check_present_tokenizer(self, planned: PlannedFile, dataset_dir: Path, companions, replacing=None) -> None:
        """A tokenizer .model already in data/tokenizers/ must be this source's (same bytes), or the shards
        would be scored with another tokenizer. One that a local dataset (other than `replacing`, a dataset
        about to be removed) names is refused; one no dataset names is removed with its `companions` (e.g.
        the .vocab), to be downloaded again."""
        destination = local_path(self.data_dir, planned.relative)
        if not destination.is_file():
            return
        expected = planned.expected_sha256 or self._recorded_tokenizer_sha256(dataset_dir)
        if expected is None:
            expected = sha256_file(self.fetch(planned.relative))  # the hub's bytes (the cache makes this cheap)
        local = sha256_file(destination)
        if local == expected:
            return
        owners = [d for d in datasets_using_tokenizer(local, self.data_dir / "datasets") if d != replacing]
        if owners:
            raise DownloadError(
                f"{destination} is not the tokenizer of {self.source.describe()} (sha256 {local[:12]}..., expected "
                f"{expected[:12]}...): it is the tokenizer of {', '.join(map(str, owners))}. Move that tokenizer "
                "and its dataset away (or delete them), then re-run"
            )
        self.log(f"replacing {destination}: not the tokenizer of {self.source.describe()} (sha256 {local[:12]}..., "
                 f"expected {expected[:12]}...) and no dataset in {self.data_dir / 'datasets'} names it")
        for path in [destination, *companions]:
            path.unlink(missing_ok=True)

    def _recorded_tokenizer_sha256(self, dataset_dir: Path):
        """The sha256 an earlier download from this source recorded in the dataset's manifest."""
        local = _read_json(dataset_dir / MANIFEST_NAME)
        if local is None or _origin_of(local.get("source")) != self.source.origin():
            return None
        return expected_tokenizer_sha256(dataset_dir)[0]

    def ensure(self, planned: PlannedFile, variant: str):
        """Make sure one planned file is present and valid locally; returns its token count for shards."""
        destination = local_path(self.data_dir, planned.relative)
        label = self.source.remote_path(planned.relative)
        if destination.is_file():
            try:
                tokens = verify_file(destination, planned, variant, str(destination), thorough=False)
                self.counts["present"] += 1
                return tokens
            except VerificationError as error:
                self.log(f"re-downloading, existing file is invalid: {error}")
                self.counts["replaced"] += 1
        # Temp files left by an interrupted earlier run are never resumed from; drop them.
        for stale in stale_temporaries(destination):
            stale.unlink(missing_ok=True)
        try:
            tokens = place_verified(self.fetch(planned.relative), destination, planned, variant, label)
        except VerificationError as first_error:
            # The cached blob itself may be damaged: fetch it once more, bypassing the cache.
            self.log(f"verification failed ({first_error}); fetching again without the cache")
            try:
                tokens = place_verified(self.fetch(planned.relative, force=True), destination, planned, variant, label)
            except VerificationError as error:
                raise DownloadError(f"refusing corrupt download: {error}") from error
        self.counts["downloaded"] += 1
        self.log(f"fetched {label} -> {destination}")
        return tokens


def _read_json(path: Path):
    """A JSON object from `path`, or None when there is no such file; an unreadable one is an error."""
    if not Path(path).is_file():
        return None
    try:
        value = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise DownloadError(f"{path}: unreadable ({error}); move it away or delete it, then re-run") from error
    if not isinstance(value, dict):
        raise DownloadError(f"{path}: not a JSON object; move it away or delete it, then re-run")
    return value


def _first_dataset(manifest: dict) -> dict:
    datasets = manifest.get("datasets")
    return datasets[0] if isinstance(datasets, list) and datasets and isinstance(datasets[0], dict) else {}


def _is_bundled_sample_build(local: dict) -> bool:
    """A dataset manifest written by build_shards.py from data/sample/tiny.jsonl.xz and nothing else."""
    if local.get("created_by") != BUILDER_NAME:
        return False
    sources = _first_dataset(local).get("sources")
    if not isinstance(sources, list) or len(sources) != 1 or not isinstance(sources[0], dict):
        return False
    return (
        sources[0].get("name") == SAMPLE_PATH.name and SAMPLE_PATH.is_file()
        and sources[0].get("sha256") == sha256_file(SAMPLE_PATH)
    )


def check_sidecars(dataset_dir: Path, files_val: int) -> int:
    """Each CaseOps byte sidecar has one entry per token of its val shard; returns their byte total."""
    total = 0
    for index in range(files_val):
        shard, sidecar = dataset_dir / shard_name("val", index), dataset_dir / sidecar_name(index)
        tokens, entries = read_header(shard).num_tokens, read_header(sidecar).num_tokens
        if tokens != entries:
            raise DownloadError(f"{sidecar} has {entries} byte counts but {shard} has {tokens} tokens; delete "
                                "both and re-run")
        total += int(read_shard(sidecar).sum(dtype=np.int64))
    return total


def write_dataset_manifest(data_dir: Path, dataset_dir: Path, entry: dict, tokenizer: dict, variant: str,
                           source: HubSource) -> Path:
    """The dataset's own manifest.json (the contract of data/manifest.py, as build_shards.py writes one): the
    challenge manifest's entries for this dataset and its tokenizer, with the sha256 of the downloaded .model
    (the challenge's manifest may not carry one) and the vocab size, plus where they came from. A CaseOps
    dataset also gets text_transform and stats.bytes_val, the byte total of its sidecars."""
    if variant.endswith(CASEOPS_SUFFIX):
        stats = dict(entry.get("stats") or {}, bytes_val=check_sidecars(dataset_dir, entry["stats"]["files_val"]))
        entry = dict(entry, stats=stats, text_transform=caseops.TRANSFORM_NAME)
    tokenizer = dict(tokenizer, vocab_size=variant_vocab_size(variant))
    model_path = tokenizer.get("model_path")
    if isinstance(model_path, str) and model_path.endswith(".model"):
        tokenizer["sha256"] = sha256_file(local_path(data_dir, model_path))
    manifest = {
        "format_version": DATASET_MANIFEST_FORMAT_VERSION,
        "created_by": DOWNLOADER_NAME,
        "source": dict(source.origin(), endpoint=source.endpoint_name(), manifest=source.remote_path(MANIFEST_NAME)),
        "datasets": [entry],
        "tokenizers": [tokenizer],
    }
    path = dataset_dir / MANIFEST_NAME
    atomic_write_bytes(path, (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode("utf-8"))
    return path


@dataclass(frozen=True)
class DownloadReport:
    dataset_dir: Path
    tokenizer_paths: tuple
    tokens_val: int
    tokens_train: int
    shards_val: int
    shards_train: int
    shards_with_counts: int
    counts: dict
    tokenizer_sha256: str | None = None


def download(
    variant: str,
    train_shards: int,
    source: HubSource,
    data_dir: Path = DATA_DIR,
    skip_manifest: bool = False,
    with_docs: bool = False,
    fetch=None,
    log=print,
) -> DownloadReport:
    if train_shards < 0:
        raise DownloadError(f"train shards must be >= 0, got {train_shards}")
    dataset_name = parse_variant(variant)
    downloader = Downloader(source, data_dir, fetch, log)
    manifest_path, origin = downloader.get_manifest(skip_manifest)
    manifest = load_manifest(manifest_path)
    entry = dataset_entry(manifest, manifest_path, variant, origin)
    tokenizer_entry = tokenizer_entry_for(manifest, manifest_path, entry)
    plan = plan_downloads(entry, tokenizer_entry, manifest_path, train_shards, with_docs)
    dataset_dir = local_path(data_dir, f"datasets/{dataset_name}")
    tokenizer_files = [p for p in plan if p.kind != "shard" and p.relative not in DOCS_FILES]
    # Every refusal comes before anything local is changed.
    sample_build = downloader.holds_sample_build(dataset_dir)
    for planned in tokenizer_files:
        if planned.kind == "tokenizer_model":
            companions = [local_path(data_dir, p.relative) for p in tokenizer_files if p is not planned]
            downloader.check_present_tokenizer(planned, dataset_dir, companions, dataset_dir if sample_build else None)
    if sample_build:
        downloader.remove_sample_build(dataset_dir)
    tokens = {"val": 0, "train": 0}
    shard_counts = {"val": 0, "train": 0}
    with_counts = 0
    for planned in plan:
        count = downloader.ensure(planned, variant)
        if planned.kind == "shard":
            split = "val" if "/fineweb_val_" in planned.relative else "train"
            tokens[split] += count
            shard_counts[split] += 1
            with_counts += planned.expected_tokens is not None
    tokenizer_paths = tuple(local_path(data_dir, planned.relative) for planned in tokenizer_files)
    dataset_manifest = write_dataset_manifest(data_dir, dataset_dir, entry, tokenizer_entry, variant, source)
    log(f"wrote {dataset_manifest}")
    return DownloadReport(
        dataset_dir=dataset_dir,
        tokenizer_paths=tokenizer_paths,
        tokens_val=tokens["val"],
        tokens_train=tokens["train"],
        shards_val=shard_counts["val"],
        shards_train=shard_counts["train"],
        shards_with_counts=with_counts,
        counts=dict(downloader.counts),
        tokenizer_sha256=expected_tokenizer_sha256(dataset_dir)[0],
    )


def summary_lines(report: DownloadReport) -> list:
    shards = report.shards_val + report.shards_train
    if report.shards_with_counts == shards:
        checks = "header, size and token count (manifest) checked for every shard"
    elif report.shards_with_counts == 0:
        checks = "header and size checked for every shard; the manifest has no per-shard token counts"
    else:
        checks = (
            f"header and size checked for every shard; token count also checked for {report.shards_with_counts} "
            f"of {shards} (the manifest has no per-shard counts for the rest)"
        )
    counts = report.counts
    model = next((path for path in report.tokenizer_paths if path.suffix == ".model"), None)
    lines = [
        f"done: {counts['downloaded']} downloaded, {counts['present']} already present and valid, "
        f"{counts['replaced']} invalid file(s) replaced",
        f"  val    {report.shards_val} shard(s), {report.tokens_val:,} tokens",
        f"  train  {report.shards_train} shard(s), {report.tokens_train:,} tokens",
        f"  checks {checks}",
        f"  data   {report.dataset_dir} (manifest.json: the dataset and its tokenizer's sha256 "
        f"{(report.tokenizer_sha256 or 'unknown')[:16]}...)",
    ]
    lines += [f"  tokenizer {path}" for path in report.tokenizer_paths]
    if model is not None:
        lines.append(f"  train with DATA_PATH={report.dataset_dir} TOKENIZER_PATH={model}")
    return lines


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        description="Download challenge FineWeb shards and tokenizer from the Hugging Face hub (manifest driven, "
        "resumable, verified). Env: MATCHED_FINEWEB_REPO_ID, MATCHED_FINEWEB_REMOTE_ROOT_PREFIX, HF_ENDPOINT.",
    )
    parser.add_argument(
        "train_shards_positional", nargs="?", type=int, default=None, metavar="TRAIN_SHARDS",
        help="number of train shards (overrides --train-shards)",
    )
    parser.add_argument(
        "--train-shards", type=int, default=DEFAULT_TRAIN_SHARDS,
        help=f"number of train shards, 100M tokens each (default {DEFAULT_TRAIN_SHARDS})",
    )
    parser.add_argument(
        "--variant", default=DEFAULT_VARIANT,
        help=f"tokenizer variant: sp<digits>, sp<digits>{CASEOPS_SUFFIX} or byte260 (default sp1024)",
    )
    parser.add_argument(
        "--skip-manifest", action="store_true", help="do not fetch manifest.json; use the local data/manifest.json",
    )
    parser.add_argument(
        "--with-docs", action="store_true",
        help="also fetch docs_selected.jsonl and docs_selected.source_manifest.json",
    )
    parser.add_argument(
        "--data-dir", type=Path, default=DATA_DIR, help="local data root (default: this script's folder, data/)",
    )
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    train_shards = args.train_shards if args.train_shards_positional is None else args.train_shards_positional
    source = HubSource.from_environ(os.environ)
    try:
        print(f"source: dataset {source.repo_id}, remote root {source.remote_root!r}, "
              f"hub {source.endpoint_name()}", flush=True)
        report = download(
            args.variant, train_shards, source, args.data_dir, args.skip_manifest, args.with_docs,
            log=lambda message: print(message, flush=True),
        )
    except (DownloadError, OSError) as error:
        message = " ".join(str(error).split())
        print(f"cached_challenge_fineweb: error: {message}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("cached_challenge_fineweb: interrupted; finished files are kept, re-run to resume", file=sys.stderr)
        return 130
    for line in summary_lines(report):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
