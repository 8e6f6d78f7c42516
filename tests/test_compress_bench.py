"""bench/compress.py: every layout gives back exactly what went in (a lossy one is caught), the byte shuffle is
SPEC_0409's, an artifact in any container loads, and the table has one row per layout x compressor."""
import io
import lzma
import sys

import pytest
import torch

from tgpt_util import REPO

sys.path.insert(0, str(REPO / "bench"))
import compress  # noqa: E402


@pytest.fixture(scope="module")
def quantized():
    unbank_state_dict, quantize_state_dict, serialize_artifact = compress.trainer_functions()
    state = compress.synthetic_state(0, layers=1, dim=256, vocab=512)  # int6, int8 and fp16 tensors
    tensors, meta = quantize_state_dict(unbank_state_dict(state))
    return tensors, meta, serialize_artifact


def test_byte_shuffle_is_spec_0409s_and_inverts():
    assert compress.shuffle(b"abcdefg") == b"BSHF\x02" + b"aceg" + b"bdf"
    assert compress.shuffle(b"a") == b"a"
    for data in (b"", b"a", b"ab", bytes(range(255)) * 3):
        assert compress.unshuffle(compress.shuffle(data)) == data


def test_planes_layout_round_trips_every_tensor(quantized):
    tensors, meta, _ = quantized
    kinds = {tensor.dtype for tensor in tensors.values()}
    assert kinds == {torch.int8, torch.float16} and any(t.dim() == 0 for t in tensors.values())
    back, back_meta = compress.from_planes(compress.planes(tensors, meta))
    assert compress.same_tensors(back, tensors) and back_meta == meta


def test_table_has_every_row_and_a_lossy_layout_is_caught(quantized, capsys, monkeypatch):
    tensors, meta, serialize_artifact = quantized
    rows = compress.measure(tensors, meta, list(compress.LAYOUTS), ["lzma6", "brotli11"], serialize_artifact)
    assert len(rows) == 4 + 2 * len(compress.LAYOUTS)
    assert [(row["layout"], row["compressor"]) for row in rows[:4]] == [
        ("trainer", "COMPRESSOR=brotli"), ("trainer BYTE_SHUFFLE=1", "COMPRESSOR=brotli"),
        ("trainer", "COMPRESSOR=ans"), ("trainer BYTE_SHUFFLE=1", "COMPRESSOR=ans")]
    assert rows[0]["bytes"] == len(serialize_artifact(tensors, meta, "brotli"))
    assert rows[3]["bytes"] == len(serialize_artifact(tensors, meta, "ans", True))
    assert rows[5]["layout"] == "torch_save" and rows[5]["compressor"] == "brotli11"
    assert abs(rows[5]["bytes"] - rows[0]["bytes"]) < 200  # torch.save's zip records its file names only
    assert rows[4 + 2 * list(compress.LAYOUTS).index("torch_save_bshf") + 1]["bytes"] == rows[1]["bytes"]
    compress.print_table(rows, "tiny")
    assert len(capsys.readouterr().out.splitlines()) == 3 + len(rows)

    decode = compress.from_planes

    def lossy(data):
        back, back_meta = decode(data)
        largest = max(back, key=lambda name: back[name].numel())
        back[largest] = back[largest] + 1
        return back, back_meta
    monkeypatch.setattr(compress, "from_planes", lossy)
    with pytest.raises(AssertionError, match="planes does not give back the tensors"):
        compress.measure(tensors, meta, ["planes"], ["lzma6"])


def test_artifacts_of_either_compressor_load(quantized):
    import brotli
    tensors, meta, serialize_artifact = quantized
    buffer = io.BytesIO()
    torch.save({"w": tensors, "m": meta}, buffer)
    for blob in (serialize_artifact(tensors, meta, "brotli"), serialize_artifact(tensors, meta, "lzma"),
                 serialize_artifact(tensors, meta, "ans", True),
                 brotli.compress(compress.shuffle(buffer.getvalue())), lzma.compress(buffer.getvalue())):
        back, back_meta = compress.load_artifact(blob)  # the ans container lists its coded tensors last
        assert compress.same_tensors(dict(sorted(back.items())), dict(sorted(tensors.items()))) and back_meta == meta
