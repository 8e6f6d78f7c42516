"""The artifact's containers: BYTE_SHUFFLE is SPEC_0409 §7.6's layout byte for byte, COMPRESSOR=pergroup round-trips
exactly, codes the groups below brotli and below each tensor's own order-0 entropy where a context pays, and damaged
or unreadable artifacts, like a missing module, are errors that say what to do."""
import importlib.metadata
import io
import lzma
import re

import brotli
import numpy as np
import pytest
import torch

from tgpt_util import tgpt  # noqa: F401 (fixture)


def quantized_tensors(tgpt, seed=0):
    """Record-like tensors: three int6 matrices from Student-t weights (rows within ±20%), one int8 embedding, fp16
    passthrough vectors, through the trainer's own quantizer."""
    generator = torch.Generator().manual_seed(seed)
    t_dist = torch.distributions.StudentT(torch.tensor(6.0))
    torch.manual_seed(seed)
    state = {"blocks.%d.mlp.fc.weight" % i: t_dist.sample((384, 256)) * (0.8 + 0.4 * torch.rand(384, 1, generator=generator))
             for i in range(3)}
    state["tok_emb.weight"] = torch.randn(512, 160, generator=generator)
    state["blocks.0.attn_scale"] = torch.randn(256, generator=generator)
    state["blocks.0.q_gain"] = torch.randn(4, generator=generator)
    return tgpt.quantize_state_dict(state)


def same(tensors_a, tensors_b) -> bool:
    return tensors_a.keys() == tensors_b.keys() and all(
        tensors_a[name].dtype == tensors_b[name].dtype and torch.equal(tensors_a[name], tensors_b[name])
        for name in tensors_a)


def order0_bytes(tensor) -> float:
    _, counts = np.unique(tensor.numpy(), return_counts=True)
    p = counts / counts.sum()
    return float(-(counts * np.log2(p)).sum() / 8)


@pytest.mark.parametrize("compressor", ["brotli", "lzma"])
def test_byte_shuffle_is_the_spec_layout_and_round_trips(tgpt, compressor):
    tensors, meta = quantized_tensors(tgpt)
    blob = tgpt.serialize_artifact(tensors, meta, compressor, byte_shuffle=True)
    raw = lzma.decompress(blob) if compressor == "lzma" else brotli.decompress(blob)
    buffer = io.BytesIO()
    torch.save({"w": tensors, "m": meta}, buffer)
    plain = buffer.getvalue()
    even = np.frombuffer(plain, dtype=np.uint8)[0::2].tobytes()
    odd = np.frombuffer(plain, dtype=np.uint8)[1::2].tobytes()
    assert raw == b"BSHF\x02" + even + odd  # SPEC_0409 §7.6: magic, the byte 2, even offsets, odd offsets
    got_tensors, got_meta = tgpt.deserialize_artifact(blob)
    assert got_meta == meta and same(got_tensors, tensors)
    assert blob != tgpt.serialize_artifact(tensors, meta, compressor)  # the setting changes the bytes


def test_pergroup_beats_brotli_on_sdclip_weights(tgpt):
    """RECIPE=2026-04-09's quantizer (SDClip: every row's scale follows its std) leaves one value distribution per
    tensor, which rANS codes at its entropy and brotli's Huffman codes cannot (1.2% on a GPU-trained 04-09 artifact,
    bench/NOTES.md)."""
    generator = torch.Generator().manual_seed(0)
    state = {"blocks.%d.mlp.fc.weight" % i: torch.randn(512, 256, generator=generator)
             * (0.8 + 0.4 * torch.rand(512, 1, generator=generator)) for i in range(4)}
    state["tok_emb.weight"] = torch.randn(512, 256, generator=generator)
    hessians = {name: torch.eye(tensor.shape[1]) for name, tensor in state.items()}
    tensors, meta = tgpt.quantize_state_dict(state, tgpt.Hyperparameters(quantizer="gptq"), hessians)
    blob = tgpt.serialize_artifact(tensors, meta, "pergroup")
    assert same(tgpt.deserialize_artifact(blob)[0], tensors)
    assert len(blob) < 0.995 * len(tgpt.serialize_artifact(tensors, meta, "brotli"))
    coded = [name for name in tensors if name.endswith(".q")]
    words = len(blob) - len(tgpt.PERGROUP_MAGIC) - 8 - int.from_bytes(blob[6:10], "little")
    assert words <= 1.002 * sum(order0_bytes(tensors[name]) for name in coded) + 8 * len(coded)


def test_pergroup_handles_a_constant_tensor(tgpt):
    tensors = {"blocks.0.mlp.fc.weight.q": torch.zeros(300, 256, dtype=torch.int8),
               "blocks.0.mlp.fc.weight.scale": torch.ones(300, dtype=torch.float16)}
    meta = {"blocks.0.mlp.fc.weight": {"type": "int6"}}
    blob = tgpt.serialize_artifact(tensors, meta, "pergroup")
    assert same(tgpt.deserialize_artifact(blob)[0], tensors)
    assert len(blob) < 1500  # a one-value tensor costs next to no words


def test_pergroup_without_constriction_is_refused_at_start_up(tgpt, monkeypatch):
    monkeypatch.setattr(tgpt, "constriction", None)
    with pytest.raises(tgpt.ConfigError, match="COMPRESSOR=pergroup needs the constriction module, which this Python "
                                               ".* lacks: pip install constriction, or set COMPRESSOR=brotli"):
        tgpt.Hyperparameters.from_env({"COMPRESSOR": "pergroup"})
    with pytest.raises(tgpt.ConfigError, match="COMPRESSOR=pergroup needs the constriction module"):
        tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"})  # the recipe's default container
    assert tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "COMPRESSOR": "brotli"}).byte_shuffle
    with pytest.raises(tgpt.ConfigError, match="COMPRESSOR='ans': expected one of pergroup, brotli, lzma"):
        tgpt.Hyperparameters.from_env({"COMPRESSOR": "ans"})  # pergroup's rANS codes smaller: one coder


def test_recipes_pick_their_containers(tgpt):
    record_0323 = tgpt.Hyperparameters.from_env({})
    record_0409 = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"})
    assert (record_0323.compressor, record_0323.byte_shuffle) == ("brotli", False)
    assert (record_0409.compressor, record_0409.byte_shuffle) == ("pergroup", True)
    assert not tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09", "BYTE_SHUFFLE": "0"}).byte_shuffle
    assert (tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27"}).compressor) == "pergroup"


def pergroup_tensors(tgpt, seed=0):
    """The 04-27 artifact's kinds of tensors, small: int7 tok_emb whose rows are noisy copies of 40 prototypes (a
    nearest-neighbour order pays), int6 c_q/fc per layer with uneven column scales, proj with uneven rows (a context
    pays), the int8 gate, LQER factors, fp16 scales and passthroughs; grouped ones of one role share a shape."""
    generator = torch.Generator().manual_seed(seed)

    def q(rows, cols, limit, spread=(0, 1)):  # spread: the scale varies across the rows (1, 0) or the columns
        scale = 4 * torch.rand((rows, cols)[0] if spread[0] else 1, cols if spread[1] else 1, generator=generator)
        return (torch.randn(rows, cols, generator=generator) * scale).round().clamp(-limit, limit).to(torch.int8)
    tensors, meta = {}, {}
    prototypes = q(40, 48, 63, spread=(0, 0))
    noise = torch.randint(-1, 2, (400, 48), generator=generator, dtype=torch.int8)
    tensors["tok_emb.weight.q"] = (prototypes[torch.randint(0, 40, (400,), generator=generator)] + noise).clamp(-63, 63)
    for layer in range(3):
        for part, (rows, cols) in {"attn.c_q": (64, 48), "mlp.fc": (128, 48)}.items():
            tensors[f"blocks.{layer}.{part}.weight.q"] = q(rows, cols, 31)
        tensors[f"blocks.{layer}.mlp.proj.weight.q"] = q(48, 128, 31, spread=(1, 0))
        tensors[f"blocks.{layer}.attn.attn_gate_w.q"] = q(4, 12, 127)
        tensors[f"blocks.{layer}.attn_scale"] = torch.rand(48, generator=generator).half()
    tensors["blocks.0.mlp.fc.weight.lqA"] = torch.randint(-2, 2, (128, 4), generator=generator, dtype=torch.int8)
    tensors["blocks.0.mlp.fc.weight.lqAs"] = torch.rand(1).half()
    for name in [name[:-2] for name in tensors if name.endswith(".q")]:
        tensors[name + ".scale"] = torch.rand(tensors[name + ".q"].shape[0], generator=generator).half()
        meta[name] = {"type": "int8"}
    meta.update({f"blocks.{layer}.attn_scale": "passthrough" for layer in range(3)})
    return tensors, meta


def test_pergroup_round_trips_every_tensor_and_beats_brotli(tgpt):
    tensors, meta = pergroup_tensors(tgpt)
    for shuffle in (False, True):
        blob = tgpt.serialize_artifact(tensors, meta, "pergroup", byte_shuffle=shuffle)
        assert blob.startswith(tgpt.PERGROUP_MAGIC)
        got_tensors, got_meta = tgpt.deserialize_artifact(blob)
        assert same(got_tensors, tensors) and got_meta == meta
        assert blob == tgpt.serialize_artifact(tensors, meta, "pergroup", byte_shuffle=shuffle)  # deterministic
    payload = {"w": dict(tensors), "m": meta}
    tgpt.encode_pergroup(payload)
    groups = {names[0]: (shape, mode, order, classes) for names, shape, _, mode, classes, _, _, order in payload["g"]}
    assert groups["blocks.0.mlp.fc.weight.q"][0] == (3, 128, 48)  # one group per role across the layers
    assert len(groups) == 5 and "blocks.0.mlp.fc.weight.lqA" in payload["w"]  # LQER factors stay in the header
    assert groups["tok_emb.weight.q"][1] == 3 and groups["tok_emb.weight.q"][2] is not None  # prototypes: chained
    fc_classes = groups["blocks.0.mlp.fc.weight.q"][3]  # uneven columns: one step, the column's class the context
    assert groups["blocks.0.mlp.fc.weight.q"][1:3] == (0, None) and fc_classes.shape == (3, 48)
    assert fc_classes.max() > 0 and groups["blocks.0.attn.c_q.weight.q"][3].max() > 0  # and they pay
    assert groups["blocks.0.mlp.proj.weight.q"][1] in (2, 4)  # uneven rows: the context along the row
    assert len(blob) < 0.95 * len(tgpt.serialize_artifact(tensors, meta, "brotli", byte_shuffle=True))


def test_nearest_neighbour_order_is_the_greedy_l1_chain(tgpt):
    rows = np.array([[0, 0], [5, 5], [1, 0], [0, 1], [4, 5], [1, 1]])
    # from 0: rows 2 and 3 at distance 1, the lower index first; from 2: 5 (1) before 3 (2); then 3, 4, 1
    assert tgpt.nearest_neighbour_order(rows).tolist() == [0, 2, 5, 3, 4, 1]


def plain_greedy_chain(matrix):
    order, left = [0], set(range(1, len(matrix)))
    while left:
        distances = {j: int(np.abs(matrix[j] - matrix[order[-1]]).sum()) for j in left}
        order.append(min(left, key=lambda j: (distances[j], j)))
        left.remove(order[-1])
    return order


def test_nearest_neighbour_order_equals_the_plain_greedy_chain_with_ties(tgpt):
    generator = np.random.default_rng(0)
    for rows, cols, low, high in ((50, 3, 0, 2), (80, 4, -2, 3), (40, 64, -63, 64), (33, 1, 0, 1), (1, 5, 0, 9)):
        matrix = generator.integers(low, high, (rows, cols)).astype(np.int8)  # few values: most steps tie
        assert tgpt.nearest_neighbour_order(matrix).tolist() == plain_greedy_chain(matrix.astype(np.int64))


def test_damaged_pergroup_artifacts_are_named_errors(tgpt, tmp_path, monkeypatch):
    tensors, meta = pergroup_tensors(tgpt)
    blob = tgpt.serialize_artifact(tensors, meta, "pergroup", byte_shuffle=True)
    path = str(tmp_path / "final_model.int6.ptz")
    crc = "^%s: its bytes do not match the CRC-32 written with them: truncated or altered$" % re.escape(path)
    for damaged in (blob[:-4], blob[:-1], blob[:200], blob[:12], blob + b"\0\0\0\0"):
        with pytest.raises(tgpt.DataError, match=crc):
            tgpt.deserialize_artifact(damaged, path)
    for position in range(len(tgpt.PERGROUP_MAGIC) + 4, len(blob), 61):  # every 61st byte, header and streams
        altered = bytearray(blob)
        altered[position] ^= 0x20
        with pytest.raises(tgpt.DataError, match="^" + re.escape(path)):
            tgpt.deserialize_artifact(bytes(altered), path)
    with pytest.raises(tgpt.DataError, match=re.escape("a pergroup container of format b'PGRP01'; this trainer reads")):
        tgpt.deserialize_artifact(b"PGRP01" + blob[6:], path)  # the format before column classes
    real_model = tgpt.ans_model
    with monkeypatch.context() as patch:  # a decoder whose model differs (another constriction version would)
        patch.setattr(tgpt, "ans_model", lambda counts: real_model(counts + np.arange(counts.size) % 2))
        with pytest.raises(tgpt.DataError, match="decode to other values than were written|do not decode"):
            tgpt.deserialize_artifact(blob, path)
    monkeypatch.setattr(tgpt, "constriction", None)
    with pytest.raises(tgpt.RunFailure, match="COMPRESSOR=pergroup artifact .* lacks the constriction module"):
        tgpt.deserialize_artifact(blob, path)
