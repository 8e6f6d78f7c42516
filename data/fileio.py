"""Small file helpers shared by the data tools: hashing and atomic writes (temp file + rename)."""

import contextlib
import hashlib
import os
from pathlib import Path

HASH_CHUNK_BYTES = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(HASH_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def temporary_path_for(path: Path) -> Path:
    """A sibling path (same directory, so the final rename is atomic) unique to this process."""
    path = Path(path)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


def stale_temporaries(path: Path) -> list:
    """Temp files for `path` left behind by any earlier (interrupted) process."""
    path = Path(path)
    return sorted(path.parent.glob(f".{path.name}.tmp-*"))


@contextlib.contextmanager
def atomic_output(path: Path):
    """Yield a temp path next to `path`; on success rename it over `path`, on error delete it.

    Readers therefore see either the old file or the complete new one, never a partial file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = temporary_path_for(path)
    try:
        yield temporary
        os.replace(temporary, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temporary.unlink()


def atomic_write_bytes(path: Path, payload: bytes) -> None:
    with atomic_output(path) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(payload)
