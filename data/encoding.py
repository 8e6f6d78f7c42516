"""Encoding documents into token arrays, in this process or in a pool of worker processes.

Each document becomes [BOS] + its tokens (no EOS), SPEC §2; with CaseOps (data/caseops.py, SPEC_0427 §2) the
text is transformed first, and validation documents also get their byte sidecar: per token, the UTF-8 bytes of
the original text it covers (0 for BOS). Work is cut into batches of records; a batch comes back as one uint16
array (and its sidecar array). Results are consumed strictly in submission order, so the token stream (and the
shards) are identical for any number of workers. JSON parsing, UTF-8 decoding and SentencePiece run in the
workers; the main process only decompresses and splits lines.
"""

import collections
import itertools
import multiprocessing
import re
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from data import caseops
from data.corpus import record_text
from data.sp_tokenizer import TokenizerError

# In CaseOps text (UTF-8), the operators, which stand for no original byte: an ESC with the operator it escapes
# (only the ESC's 3 bytes stand for nothing), or an unescaped TITLE/ALLCAPS/CAPNEXT. 0xEE is a lead byte, so a
# match always starts on a character.
_OPERATOR_UTF8 = re.compile(rb"\xee\x80\x84\xee\x80[\x81-\x84]|\xee\x80[\x81-\x83]")
_MAX_COUNT = np.iinfo(np.uint16).max


def _varint(buf: bytes, pos: int) -> tuple:
    result = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, pos
        shift += 7


def piece_ids_and_begins(serialized: bytes) -> tuple:
    """(ids, begins) of a SentencePieceText proto: each piece's id and the UTF-8 offset where its surface
    starts in the encoded text (top-level field 2 = pieces; in a piece, field 2 = id and 4 = begin, varints;
    1 and 3 are strings). A hand-written reader: protobuf is not a dependency, and this runs once per token."""
    ids, begins, position, size = [], [], 0, len(serialized)
    while position < size:
        key, position = _varint(serialized, position)
        wire = key & 7
        if wire == 0:
            _, position = _varint(serialized, position)
            continue
        if wire == 5:
            position += 4
            continue
        if wire != 2:
            raise ValueError(f"unexpected protobuf wire type {wire} in a SentencePieceText")
        length, position = _varint(serialized, position)
        end = position + length
        if key >> 3 != 2:
            position = end
            continue
        piece_id = begin = 0
        while position < end:
            field = serialized[position]
            position += 1
            if field & 7 == 2:
                length, position = _varint(serialized, position)
                position += length
            else:
                value, position = _varint(serialized, position)
                if field == 0x10:
                    piece_id = value
                elif field == 0x20:
                    begin = value
        ids.append(piece_id)
        begins.append(begin)
    return ids, begins


def original_byte_counts(text_utf8: bytes, begins) -> np.ndarray:
    """Per piece, the original (pre-CaseOps) UTF-8 bytes of the text from its begin to the next piece's begin;
    the first piece starts at 0 and the last runs to the end, so whitespace the tokenizer's normalization drops
    still counts and the counts sum to the original document's UTF-8 length exactly (unless there is no piece:
    an empty or all-whitespace document, whose bytes no token covers)."""
    if not begins:
        return np.zeros(0, dtype=np.int64)
    weights = np.ones(len(text_utf8), dtype=np.int64)
    starts = np.fromiter((match.start() for match in _OPERATOR_UTF8.finditer(text_utf8)), dtype=np.int64)
    weights[(starts[:, None] + np.arange(3)).ravel()] = 0
    cumulative = np.concatenate(([0], np.cumsum(weights)))
    bounds = np.asarray([0, *begins[1:], len(text_utf8)], dtype=np.int64)
    return cumulative[bounds[1:]] - cumulative[bounds[:-1]]


class BatchEncoder:
    """Turns a list of Records into one uint16 array of [BOS] + tokens per document (and, on request, the
    CaseOps byte sidecar of the same length)."""

    def __init__(self, model_bytes: bytes, vocab_size: int, text_field: str = "text", caseops_on: bool = False):
        import sentencepiece as spm

        self.processor = spm.SentencePieceProcessor(model_proto=model_bytes)
        self.bos_id = self.processor.bos_id()
        self.vocab_size = vocab_size
        self.text_field = text_field
        self.caseops = caseops_on

    def __call__(self, records, byte_counts: bool = False) -> tuple:
        """(tokens, sidecar or None); byte_counts asks for the sidecar (CaseOps only)."""
        texts = [record_text(record, self.text_field) for record in records]
        if self.caseops:
            texts = [caseops.encode(text) for text in texts]
        # One thread per encoder: parallelism comes from the worker processes. (SentencePiece's default
        # for a list is one thread per core, which would oversubscribe N workers N-fold.)
        if byte_counts:
            protos = self.processor.encode(texts, out_type="serialized_proto", num_threads=1)
            pieces = [piece_ids_and_begins(proto) for proto in protos]
            encoded = [ids for ids, _ in pieces]
            counts = [original_byte_counts(text.encode("utf-8"), begins) for text, (_, begins) in zip(texts, pieces)]
        else:
            encoded = self.processor.encode(texts, out_type=int, num_threads=1)
        total = sum(map(len, encoded)) + len(encoded)
        bos = (self.bos_id,)
        flat = itertools.chain.from_iterable(piece for document in encoded for piece in (bos, document))
        tokens = np.fromiter(flat, dtype=np.int32, count=total)
        if total and int(tokens.max()) >= self.vocab_size:
            raise TokenizerError(f"tokenizer produced id {int(tokens.max())} >= vocab size {self.vocab_size}")
        if not byte_counts:
            return tokens.astype(np.uint16), None
        sidecar = np.concatenate([part for document in counts for part in (np.zeros(1, np.int64), document)])
        if sidecar.size and int(sidecar.max()) > _MAX_COUNT:
            raise TokenizerError(f"a token covers {int(sidecar.max())} bytes of text, more than a uint16 sidecar "
                                 "entry holds (a run of whitespace that long?)")
        return tokens.astype(np.uint16), sidecar.astype(np.uint16)


# One encoder per worker process, built once by the pool initializer (it holds the loaded model).
_worker_encoder = None


def _init_worker(model_bytes: bytes, vocab_size: int, text_field: str, caseops_on: bool) -> None:
    global _worker_encoder
    _worker_encoder = BatchEncoder(model_bytes, vocab_size, text_field, caseops_on)


def _encode_in_worker(records, byte_counts: bool) -> tuple:
    return _worker_encoder(records, byte_counts)


def encode_batches(batches, model_bytes: bytes, vocab_size: int, workers: int, text_field: str = "text",
                   caseops_on: bool = False):
    """Yield (tag, tokens, sidecar) for each (tag, records) in `batches`, in order; with caseops_on the "val"
    batches come with their byte sidecar, every other batch with None.

    workers == 1 encodes in this process. Otherwise a spawn-context process pool encodes with at most
    2*workers batches in flight, so reading stays just ahead of encoding and memory stays bounded.
    """
    if workers <= 1:
        encoder = BatchEncoder(model_bytes, vocab_size, text_field, caseops_on)
        for tag, records in batches:
            yield (tag, *encoder(records, caseops_on and tag == "val"))
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(model_bytes, vocab_size, text_field, caseops_on),
    ) as pool:
        pending = collections.deque()
        try:
            for tag, records in batches:
                pending.append((tag, pool.submit(_encode_in_worker, records, caseops_on and tag == "val")))
                if len(pending) >= 2 * workers:
                    tag_done, future = pending.popleft()
                    yield (tag_done, *future.result())
            while pending:
                tag_done, future = pending.popleft()
                yield (tag_done, *future.result())
        finally:
            # On an error (or an abandoned generator) do not wait for batches nobody will read.
            pool.shutdown(wait=True, cancel_futures=True)
