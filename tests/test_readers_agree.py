"""The trainer's shard reader (train_gpt.py, single-file rule) and data/shards.py must agree on every file."""
import sys

import numpy as np
import pytest

from tgpt_util import REPO, tgpt, write_shard  # noqa: F401 (fixture)

sys.path.insert(0, str(REPO))
from data import shards  # noqa: E402


def test_both_readers_return_the_same_tokens(tgpt, tmp_path):
    rng = np.random.default_rng(0)
    for index, size in enumerate((0, 1, 1000, 65535)):
        tokens = rng.integers(0, 1024, size=size)
        path = tmp_path / shards.shard_name("train", index)
        shards.write_shard(path, tokens, vocab_size=1024)
        ours = tgpt.load_data_shard(str(path))
        theirs = shards.read_shard(path, vocab_size=1024)
        assert ours.dtype == theirs.dtype == np.dtype("<u2")
        assert np.array_equal(ours, theirs) and np.array_equal(ours, tokens)


@pytest.mark.parametrize("damage", ["magic", "version", "count", "truncate", "append"])
def test_both_readers_reject_the_same_damage(tgpt, tmp_path, damage):
    path = tmp_path / "fineweb_val_000000.bin"
    write_shard(path, np.arange(50))
    raw = bytearray(path.read_bytes())
    if damage == "magic":
        raw[0:4] = np.int32(7).tobytes()
    elif damage == "version":
        raw[4:8] = np.int32(3).tobytes()
    elif damage == "count":
        raw[8:12] = np.int32(51).tobytes()
    elif damage == "truncate":
        raw = raw[:-2]
    else:
        raw += b"\0\0"
    path.write_bytes(bytes(raw))
    with pytest.raises(tgpt.ShardFormatError, match=str(path)):
        tgpt.load_data_shard(str(path))
    with pytest.raises(shards.ShardFormatError, match=str(path)):
        shards.read_shard(path)
