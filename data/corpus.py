"""Reading text corpora: JSONL or plain text, uncompressed, gzip or xz, as a stream of documents.

Compression is detected from the file's magic bytes; the format from the name without its compression
suffix (`.jsonl`, `.json`, `.ndjson` are JSONL, anything else is plain text). A JSONL document is one
non-blank line whose `text_field` holds a string. A plain-text document is, by `text_unit`:
`paragraph` (lines up to a blank line), `line` (each non-blank line) or `file` (the whole file).

Records travel as raw bytes plus their location, so that decoding and JSON parsing can run in the
encoding workers; `record_text` turns a record into its text and reports bad input by file and line.
"""

import gzip
import hashlib
import io
import json
import lzma
from dataclasses import dataclass
from pathlib import Path

XZ_MAGIC = b"\xfd7zXZ\x00"
GZIP_MAGIC = b"\x1f\x8b"
JSONL_SUFFIXES = (".jsonl", ".json", ".ndjson")
COMPRESSION_SUFFIXES = (".gz", ".xz")
TEXT_UNITS = ("paragraph", "line", "file")


class CorpusError(ValueError):
    """Bad or unusable input text; the message names the file (and line where there is one)."""


@dataclass(frozen=True)
class Record:
    """One document as raw bytes, with where it came from (for error messages)."""

    source: str
    line: int
    raw: bytes
    fmt: str  # "jsonl" or "text"


@dataclass(frozen=True)
class SourceStats:
    name: str
    bytes: int
    sha256: str
    docs: int


def input_format(path: Path) -> str:
    name = Path(path).name.lower()
    for suffix in COMPRESSION_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
    return "jsonl" if name.endswith(JSONL_SUFFIXES) else "text"


class HashingReader(io.RawIOBase):
    """Wraps a binary file: counts and sha256-hashes every byte read through it (the on-disk bytes)."""

    def __init__(self, handle):
        super().__init__()
        self._handle = handle
        self.bytes_read = 0
        self._digest = hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        count = self._handle.readinto(buffer)
        if count:
            self._digest.update(memoryview(buffer)[:count])
            self.bytes_read += count
        return count

    def drain(self) -> None:
        """Read whatever the decompressor left unread, so the hash covers the whole file."""
        buffer = bytearray(1 << 20)
        while self.readinto(buffer):
            pass

    def hexdigest(self) -> str:
        return self._digest.hexdigest()

    def close(self) -> None:
        self._handle.close()
        super().close()


def _open_decompressed(path: Path, raw: HashingReader):
    with open(path, "rb") as probe:
        magic = probe.read(len(XZ_MAGIC))
    if magic.startswith(XZ_MAGIC):
        return lzma.LZMAFile(raw)
    if magic.startswith(GZIP_MAGIC):
        return gzip.GzipFile(fileobj=raw)
    return io.BufferedReader(raw, buffer_size=1 << 20)


def _split_documents(stream, fmt: str, text_unit: str, source: str):
    """Yield Records from a decompressed binary stream."""
    if fmt == "jsonl" or text_unit == "line":
        for line_number, line in enumerate(stream, 1):
            if line.strip():
                yield Record(source, line_number, line, fmt)
        return
    if text_unit == "file":
        content = stream.read()
        if content.strip():
            yield Record(source, 1, content, fmt)
        return
    paragraph, start = [], 0
    for line_number, line in enumerate(stream, 1):
        if line.strip():
            if not paragraph:
                start = line_number
            paragraph.append(line)
        elif paragraph:
            yield Record(source, start, b"".join(paragraph), fmt)
            paragraph = []
    if paragraph:
        yield Record(source, start, b"".join(paragraph), fmt)


class CorpusReader:
    """Iterates the documents of several input files in the given order, hashing each file as read.

    `bytes_read` (on-disk bytes consumed so far, for progress) and `sources` (per-file stats, filled in
    as each file is finished) are readable during and after iteration.
    """

    def __init__(self, paths, text_unit: str = "paragraph"):
        if text_unit not in TEXT_UNITS:
            raise ValueError(f"text_unit must be one of {TEXT_UNITS}, got {text_unit!r}")
        self.paths = [Path(path) for path in paths]
        self.text_unit = text_unit
        self.sources = []
        self._finished_bytes = 0
        self._current = None
        for path in self.paths:
            if not path.is_file():
                raise CorpusError(f"{path}: input file not found")

    @property
    def total_bytes(self) -> int:
        return sum(path.stat().st_size for path in self.paths)

    @property
    def bytes_read(self) -> int:
        return self._finished_bytes + (self._current.bytes_read if self._current is not None else 0)

    def __iter__(self):
        for path in self.paths:
            yield from self._read_file(path)

    def _read_file(self, path: Path):
        fmt = input_format(path)
        raw = HashingReader(open(path, "rb"))
        self._current = raw
        docs = 0
        try:
            stream = _open_decompressed(path, raw)
            try:
                for record in _split_documents(stream, fmt, self.text_unit, str(path)):
                    docs += 1
                    yield record
            except (OSError, EOFError, lzma.LZMAError) as error:
                raise CorpusError(f"{path}: cannot decompress/read ({error})") from error
            raw.drain()
        finally:
            raw.close()
            self._current = None
        self._finished_bytes += raw.bytes_read
        self.sources.append(SourceStats(path.name, raw.bytes_read, raw.hexdigest(), docs))


def record_text(record: Record, text_field: str = "text") -> str:
    """The document text of a record; raises CorpusError naming file and line on bad input.

    Plain-text documents lose their final line break only; JSONL text is taken as stored.
    """
    where = f"{record.source}:{record.line}"
    try:
        if record.fmt != "jsonl":
            return record.raw.decode("utf-8").rstrip("\r\n")
        document = json.loads(record.raw)
    except UnicodeDecodeError as error:
        raise CorpusError(f"{where}: invalid UTF-8 ({error})") from error
    except json.JSONDecodeError as error:
        raise CorpusError(f"{where}: invalid JSON ({error})") from error
    text = document.get(text_field) if isinstance(document, dict) else None
    if not isinstance(text, str):
        raise CorpusError(f"{where}: JSON line has no string field {text_field!r}")
    return text
