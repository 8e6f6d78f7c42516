"""The token shard format (SPEC §2): the only place in data/ that knows it.

A shard is 256 little-endian int32 header words [magic 20240520, version 1, token count N, zeros...]
followed by N little-endian uint16 token ids, so its size is exactly 1024 + 2*N bytes. Files are named
`fineweb_{train,val}_%06d.bin` and a split is read as the sorted glob of its names. A CaseOps dataset's byte
sidecar `fineweb_val_bytes_%06d.bin` (SPEC_0427 §2) has the same format, one uint16 per token of the val shard
of the same number: the original text's UTF-8 bytes that token covers.

Every reader here validates the magic, the version, the count and the file size against the count, and
raises ShardFormatError with the file name in the message. The header's padding words are written as
zeros but not checked on read (other writers of the format are not required to zero them).
"""

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from data.fileio import atomic_output

MAGIC = 20240520
VERSION = 1
HEADER_WORDS = 256
HEADER_BYTES = HEADER_WORDS * 4
HEADER_DTYPE = np.dtype("<i4")
TOKEN_DTYPE = np.dtype("<u2")
TOKEN_BYTES = TOKEN_DTYPE.itemsize
MAX_VOCAB_SIZE = 1 << 16  # token ids must fit uint16
MAX_TOKENS = (1 << 31) - 1  # the count is an int32 header word
SPLITS = ("train", "val")


class ShardFormatError(ValueError):
    """A shard file (or the tokens meant for one) breaks the format; the message names the file."""


@dataclass(frozen=True)
class ShardInfo:
    path: Path
    num_tokens: int

    @property
    def file_bytes(self) -> int:
        return expected_file_bytes(self.num_tokens)


def shard_name(split: str, index: int) -> str:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return f"fineweb_{split}_{index:06d}.bin"


def list_shards(directory: Path, split: str) -> list:
    if split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
    return sorted(Path(directory).glob(f"fineweb_{split}_[0-9]*.bin"))  # not the fineweb_val_bytes_ sidecars


def sidecar_name(index: int) -> str:
    """The byte sidecar of val shard `index`."""
    return f"fineweb_val_bytes_{index:06d}.bin"


def list_sidecars(directory: Path) -> list:
    return sorted(Path(directory).glob("fineweb_val_bytes_*.bin"))


def expected_file_bytes(num_tokens: int) -> int:
    return HEADER_BYTES + TOKEN_BYTES * num_tokens


def _parse_header(path: Path, header_bytes: bytes, file_size: int, label=None) -> ShardInfo:
    """`label` names the file in error messages (default: its path)."""
    shown = path if label is None else label
    if len(header_bytes) < HEADER_BYTES:
        raise ShardFormatError(
            f"{shown}: file is {file_size} bytes, shorter than the {HEADER_BYTES}-byte shard header"
        )
    header = np.frombuffer(header_bytes, dtype=HEADER_DTYPE, count=HEADER_WORDS)
    magic, version, num_tokens = (int(word) for word in header[:3])
    if magic != MAGIC:
        raise ShardFormatError(f"{shown}: bad magic {magic} (expected {MAGIC}); not a token shard")
    if version != VERSION:
        raise ShardFormatError(f"{shown}: unsupported shard version {version} (expected {VERSION})")
    if num_tokens < 0:
        raise ShardFormatError(f"{shown}: negative token count {num_tokens} in header")
    expected = expected_file_bytes(num_tokens)
    if file_size != expected:
        raise ShardFormatError(
            f"{shown}: size {file_size} bytes does not match the header's token count {num_tokens} "
            f"(expected {expected} bytes = {HEADER_BYTES} + 2*{num_tokens})"
        )
    return ShardInfo(Path(path), num_tokens)


def read_header(path: Path, label=None) -> ShardInfo:
    """Validate magic, version and size against the count, without reading the tokens."""
    with open(path, "rb") as handle:
        file_size = _file_size(handle)
        return _parse_header(path, handle.read(HEADER_BYTES), file_size, label)


def _file_size(handle) -> int:
    return os.fstat(handle.fileno()).st_size


def check_token_range(path: Path, tokens: np.ndarray, vocab_size: int) -> None:
    """Raise if any token id is >= vocab_size (or negative), naming the first offending position."""
    if tokens.size == 0:
        return
    bad = (tokens >= vocab_size) | (tokens < 0) if tokens.dtype.kind == "i" else tokens >= vocab_size
    if bad.any():
        position = int(np.argmax(bad))
        raise ShardFormatError(
            f"{path}: token id {int(tokens[position])} at position {position} is outside the vocabulary "
            f"(vocab size {vocab_size})"
        )


def read_shard(path: Path, vocab_size: int | None = None) -> np.ndarray:
    """Read a whole shard into memory as a uint16 array, validating header, size and (optionally) ids."""
    with open(path, "rb") as handle:
        info = _parse_header(path, handle.read(HEADER_BYTES), _file_size(handle))
        tokens = np.fromfile(handle, dtype=TOKEN_DTYPE, count=info.num_tokens)
    if tokens.size != info.num_tokens:
        raise ShardFormatError(f"{path}: short read, got {tokens.size} of {info.num_tokens} tokens")
    if vocab_size is not None:
        check_token_range(path, tokens, vocab_size)
    return tokens.astype(np.uint16, copy=False)


def open_shard(path: Path) -> np.ndarray:
    """Memory-map a shard's tokens read-only (after validating its header and size)."""
    info = read_header(path)
    if info.num_tokens == 0:
        return np.empty(0, dtype=TOKEN_DTYPE)
    return np.memmap(path, dtype=TOKEN_DTYPE, mode="r", offset=HEADER_BYTES, shape=(info.num_tokens,))


def verify_shard(
    path: Path, expected_tokens: int | None = None, vocab_size: int | None = None, label=None
) -> ShardInfo:
    """Header and size checks, plus the token count against an expected value and ids against a vocab.
    `label` names the file in error messages (default: its path)."""
    shown = path if label is None else label
    info = read_header(path, label)
    if expected_tokens is not None and info.num_tokens != expected_tokens:
        raise ShardFormatError(
            f"{shown}: header says {info.num_tokens} tokens but the manifest expects {expected_tokens}"
        )
    if vocab_size is not None:
        check_token_range(shown, open_shard(path), vocab_size)
    return info


def write_shard(path: Path, tokens, vocab_size: int | None = None) -> ShardInfo:
    """Write tokens as a shard atomically (temp file + rename); ids must fit uint16 and the vocab."""
    path = Path(path)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1 or tokens.dtype.kind not in "iu":
        raise ShardFormatError(f"{path}: tokens must be a 1-D integer array, got {tokens.dtype} {tokens.shape}")
    if tokens.size > MAX_TOKENS:
        raise ShardFormatError(f"{path}: {tokens.size} tokens do not fit the int32 header count")
    limit = MAX_VOCAB_SIZE if vocab_size is None else min(vocab_size, MAX_VOCAB_SIZE)
    check_token_range(path, tokens, limit)
    header = np.zeros(HEADER_WORDS, dtype=HEADER_DTYPE)
    header[:3] = (MAGIC, VERSION, tokens.size)
    body = np.ascontiguousarray(tokens, dtype=TOKEN_DTYPE)
    with atomic_output(path) as temporary:
        with open(temporary, "wb") as handle:
            handle.write(header.tobytes())
            handle.write(memoryview(body).cast("B"))
    return ShardInfo(path, int(tokens.size))
