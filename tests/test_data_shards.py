"""The shard format module: round trips, the exact byte layout, and every corruption named in SPEC §2."""

import os
import struct

import numpy as np
import pytest

import test_data_fixtures  # noqa: F401  (puts the repo root on sys.path)
from data.shards import (
    HEADER_BYTES,
    ShardFormatError,
    list_shards,
    open_shard,
    read_header,
    read_shard,
    shard_name,
    verify_shard,
    write_shard,
)

SPEC_MAGIC, SPEC_VERSION = 20240520, 1


def spec_bytes(tokens, magic=SPEC_MAGIC, version=SPEC_VERSION, count=None):
    """The SPEC layout built by hand (struct, not the module under test)."""
    count = len(tokens) if count is None else count
    header = struct.pack("<256i", magic, version, count, *([0] * 253))
    return header + struct.pack(f"<{len(tokens)}H", *tokens)


def test_write_matches_spec_bytes_and_round_trips(tmp_path):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 1024, size=5000).astype(np.uint16)
    tokens[:2] = (0, 1023)
    path = tmp_path / shard_name("train", 0)
    info = write_shard(path, tokens, vocab_size=1024)
    assert path.read_bytes() == spec_bytes(tokens.tolist())
    assert info.num_tokens == 5000 and os.path.getsize(path) == 1024 + 2 * 5000 == info.file_bytes
    np.testing.assert_array_equal(read_shard(path, vocab_size=1024), tokens)
    mapped = open_shard(path)
    np.testing.assert_array_equal(np.asarray(mapped), tokens)
    assert read_header(path).num_tokens == 5000
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temp file left behind


def test_reads_a_hand_written_file_and_int32_input(tmp_path):
    path = tmp_path / "fineweb_val_000000.bin"
    path.write_bytes(spec_bytes([1, 65535, 7]))
    np.testing.assert_array_equal(read_shard(path), [1, 65535, 7])
    write_shard(path, np.array([5, 6], dtype=np.int64))
    assert path.read_bytes() == spec_bytes([5, 6])


def test_empty_shard_round_trips(tmp_path):
    path = tmp_path / "fineweb_val_000000.bin"
    write_shard(path, np.zeros(0, dtype=np.uint16))
    assert os.path.getsize(path) == HEADER_BYTES
    assert read_shard(path).size == 0 and open_shard(path).size == 0


def test_names_and_sorted_listing(tmp_path):
    assert shard_name("val", 3) == "fineweb_val_000003.bin"
    for index in (10, 2, 0):
        write_shard(tmp_path / shard_name("train", index), [1])
    write_shard(tmp_path / shard_name("val", 0), [1])
    assert [p.name for p in list_shards(tmp_path, "train")] == [
        "fineweb_train_000000.bin", "fineweb_train_000002.bin", "fineweb_train_000010.bin"
    ]
    with pytest.raises(ValueError):
        shard_name("test", 0)


CORRUPTIONS = {
    "magic": (spec_bytes([1, 2, 3], magic=12345), "bad magic 12345"),
    "version": (spec_bytes([1, 2, 3], version=2), "unsupported shard version 2"),
    "truncated": (spec_bytes([1, 2, 3])[:-2], "does not match the header's token count 3"),
    "extra_bytes": (spec_bytes([1, 2, 3]) + b"\0\0", "does not match the header's token count 3"),
    "count_too_big": (spec_bytes([1, 2, 3], count=4), "does not match the header's token count 4"),
    "negative_count": (spec_bytes([], count=-1), "negative token count"),
    "short_header": (spec_bytes([1])[:100], "shorter than the 1024-byte shard header"),
}


@pytest.mark.parametrize("kind", sorted(CORRUPTIONS))
def test_corrupt_files_raise_named_error_with_file_name(tmp_path, kind):
    payload, expected = CORRUPTIONS[kind]
    path = tmp_path / f"fineweb_train_{kind}.bin"
    path.write_bytes(payload)
    for reader in (read_header, read_shard, open_shard, verify_shard):
        with pytest.raises(ShardFormatError) as caught:
            reader(path)
        assert path.name in str(caught.value) and expected in str(caught.value)
    assert issubclass(ShardFormatError, ValueError)


def test_token_id_at_or_above_vocab_is_rejected_on_read(tmp_path):
    path = tmp_path / "fineweb_val_000000.bin"
    path.write_bytes(spec_bytes([1, 5, 1023, 1024, 9]))
    assert read_shard(path).size == 5  # the format itself is fine
    with pytest.raises(ShardFormatError) as caught:
        read_shard(path, vocab_size=1024)
    message = str(caught.value)
    assert path.name in message and "token id 1024 at position 3" in message and "vocab size 1024" in message
    with pytest.raises(ShardFormatError):
        verify_shard(path, vocab_size=1024)
    assert verify_shard(path, vocab_size=1025).num_tokens == 5


def test_write_refuses_bad_tokens_and_keeps_the_old_file(tmp_path):
    path = tmp_path / "fineweb_train_000000.bin"
    write_shard(path, [1, 2])
    before = path.read_bytes()
    for bad, vocab in (([1, 1024], 1024), ([-1, 3], None), ([70000], None), ([[1, 2]], None), ([0.5], None)):
        with pytest.raises(ShardFormatError) as caught:
            write_shard(path, np.array(bad), vocab_size=vocab)
        assert path.name in str(caught.value)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_verify_checks_expected_token_count(tmp_path):
    path = tmp_path / "fineweb_val_000000.bin"
    write_shard(path, [1, 2, 3])
    assert verify_shard(path, expected_tokens=3).num_tokens == 3
    with pytest.raises(ShardFormatError, match="header says 3 tokens but the manifest expects 4"):
        verify_shard(path, expected_tokens=4)
    with pytest.raises(ShardFormatError, match="^remote/x.bin: header says 3"):
        verify_shard(path, expected_tokens=4, label="remote/x.bin")
