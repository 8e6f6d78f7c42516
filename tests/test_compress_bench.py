"""bench/compress.py: each container row is the trainer's serialize_artifact and round-trips (a lossy one is caught),
a container whose module or binary is missing says so instead of failing, the record's per-group lrzip layout (row
orders, column-major groups) gives back every tensor, and the tables have one row per container and group."""
import lzma
import sys

import pytest

from tgpt_util import REPO

sys.path.insert(0, str(REPO / "bench"))
import compress  # noqa: E402
from harness import load_trainer  # noqa: E402


@pytest.fixture(scope="module")
def trainer():
    return load_trainer()


@pytest.fixture(scope="module")
def quantized(trainer):
    return compress.synthetic_0323(trainer, 0, layers=1, dim=256, vocab=512)  # int6, int8 and fp16 tensors


def test_every_container_row_is_the_trainers_and_round_trips(trainer, quantized, capsys):
    tensors, meta = quantized
    containers = ["lzma", "brotli", "brotli+shuffle", "pergroup", "pergroup+shuffle"]
    rows, lrzip_bytes = compress.measure(trainer, tensors, meta, containers)
    assert [row["container"] for row in rows] == containers and lrzip_bytes == {}
    for row in rows:
        compressor, shuffle = compress.CONTAINERS[row["container"]]
        assert row["bytes"] == len(trainer.serialize_artifact(tensors, meta, compressor, shuffle))
    compress.print_tables(trainer, tensors, meta, rows, lrzip_bytes, "tiny")
    container_part, _, group_part = capsys.readouterr().out.partition("| group (pergroup)")
    container_rows = [line for line in container_part.splitlines() if line.startswith("| ")][1:]  # after the header
    group_rows = [line for line in group_part.splitlines() if line.startswith("| ")]
    assert [line.split()[1] for line in container_rows] == containers
    payload = {"w": dict(tensors), "m": meta}
    trainer.encode_pergroup(payload)
    assert [line.split()[1] for line in group_rows] == [names[0] for names, *_ in payload["g"]]
    assert all(line.endswith("| - |") for line in group_rows)  # no lrzip row, so no lrzip bytes per group


def test_a_lossy_container_is_caught(trainer, quantized, monkeypatch):
    tensors, meta = quantized
    decode = trainer.deserialize_artifact

    def lossy(blob, *args):
        back, back_meta = decode(blob, *args)
        largest = max(back, key=lambda name: back[name].numel())
        back[largest] = back[largest] + 1
        return back, back_meta
    monkeypatch.setattr(trainer, "deserialize_artifact", lossy)
    with pytest.raises(AssertionError, match="brotli does not give back the tensors"):
        compress.measure(trainer, tensors, meta, ["brotli"])


def test_missing_codecs_give_rows_that_say_so(trainer, quantized, monkeypatch):
    tensors, meta = quantized
    monkeypatch.setattr(compress.shutil, "which", lambda name: None)
    monkeypatch.setitem(compress.NEEDS, "pergroup", "a_module_that_does_not_exist")
    rows, _ = compress.measure(trainer, tensors, meta, ["pergroup+shuffle", "lrzip", "lzma"])
    assert [(row["container"], row["bytes"]) for row in rows[:2]] == [("pergroup+shuffle", None), ("lrzip", None)]
    assert rows[0]["skipped"] == "no a_module_that_does_not_exist" and "lrzip binary" in rows[1]["skipped"]
    assert rows[2]["bytes"] > 0


def test_the_records_per_group_layout_gives_back_every_tensor(trainer, quantized, monkeypatch):
    """lrzip itself stands in as lzma (same bytes in, same bytes out); what is checked is the record's layout around
    it: groups by role, hot groups' rows in nearest-neighbour order and put back, column-major matrices."""
    tensors, meta = quantized
    monkeypatch.setattr(compress, "run_lrzip", lambda args, data: lzma.compress(data) if "-z" in args
                        else lzma.decompress(data))
    monkeypatch.setattr(compress.shutil, "which", lambda name: "/usr/bin/lrzip")
    reversed_rows = lambda matrix: list(range(len(matrix)))[::-1]  # noqa: E731  (an order that is not the identity)
    groups = compress.lrzip_groups(trainer, tensors, reversed_rows)
    assert "tok_emb.weight.q" in groups and groups["tok_emb.weight.q"][1] is not None  # a hot group: ordered
    assert all(orders is None for role, (_, orders) in groups.items() if role not in trainer.HOT_GROUPS)
    rows, lrzip_bytes = compress.measure(trainer, tensors, meta, ["lrzip"], reversed_rows)
    assert set(lrzip_bytes) == {names[0] for names, _ in groups.values()}  # the per-group table's keys
    assert rows[0]["bytes"] > sum(lrzip_bytes.values())  # the groups, the rest and the orders
