"""Encoding documents into token arrays, in this process or in a pool of worker processes.

Each document becomes [BOS] + its tokens (no EOS), SPEC §2. Work is cut into batches of records; a
batch comes back as one uint16 array. Results are consumed strictly in submission order, so the token
stream (and the shards) are identical for any number of workers. JSON parsing, UTF-8 decoding and
SentencePiece run in the workers; the main process only decompresses and splits lines.
"""

import collections
import itertools
import multiprocessing
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from data.corpus import record_text
from data.sp_tokenizer import TokenizerError


class BatchEncoder:
    """Turns a list of Records into one uint16 array of [BOS] + tokens per document."""

    def __init__(self, model_bytes: bytes, vocab_size: int, text_field: str = "text"):
        import sentencepiece as spm

        self.processor = spm.SentencePieceProcessor(model_proto=model_bytes)
        self.bos_id = self.processor.bos_id()
        self.vocab_size = vocab_size
        self.text_field = text_field

    def __call__(self, records) -> np.ndarray:
        texts = [record_text(record, self.text_field) for record in records]
        # One thread per encoder: parallelism comes from the worker processes. (SentencePiece's default
        # for a list is one thread per core, which would oversubscribe N workers N-fold.)
        encoded = self.processor.encode(texts, out_type=int, num_threads=1)
        total = sum(map(len, encoded)) + len(encoded)
        bos = (self.bos_id,)
        flat = itertools.chain.from_iterable(piece for document in encoded for piece in (bos, document))
        tokens = np.fromiter(flat, dtype=np.int32, count=total)
        if total and int(tokens.max()) >= self.vocab_size:
            raise TokenizerError(f"tokenizer produced id {int(tokens.max())} >= vocab size {self.vocab_size}")
        return tokens.astype(np.uint16)


# One encoder per worker process, built once by the pool initializer (it holds the loaded model).
_worker_encoder = None


def _init_worker(model_bytes: bytes, vocab_size: int, text_field: str) -> None:
    global _worker_encoder
    _worker_encoder = BatchEncoder(model_bytes, vocab_size, text_field)


def _encode_in_worker(records) -> np.ndarray:
    return _worker_encoder(records)


def encode_batches(batches, model_bytes: bytes, vocab_size: int, workers: int, text_field: str = "text"):
    """Yield (tag, tokens) for each (tag, records) in `batches`, in order.

    workers == 1 encodes in this process. Otherwise a spawn-context process pool encodes with at most
    2*workers batches in flight, so reading stays just ahead of encoding and memory stays bounded.
    """
    if workers <= 1:
        encoder = BatchEncoder(model_bytes, vocab_size, text_field)
        for tag, records in batches:
            yield tag, encoder(records)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(
        max_workers=workers,
        mp_context=context,
        initializer=_init_worker,
        initargs=(model_bytes, vocab_size, text_field),
    ) as pool:
        pending = collections.deque()
        try:
            for tag, records in batches:
                pending.append((tag, pool.submit(_encode_in_worker, records)))
                if len(pending) >= 2 * workers:
                    tag_done, future = pending.popleft()
                    yield tag_done, future.result()
            while pending:
                tag_done, future = pending.popleft()
                yield tag_done, future.result()
        finally:
            # On an error (or an abandoned generator) do not wait for batches nobody will read.
            pool.shutdown(wait=True, cancel_futures=True)
