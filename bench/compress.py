"""Artifact compression: bytes and seconds of lossless layouts x compressors on the trainer's quantized tensors.

    python bench/compress.py logs/RUN_ID/final_model.pt         a trained state dict (each run writes one there)
    python bench/compress.py logs/RUN_ID/final_model.int6.ptz   an artifact's tensors (lzma or brotli, BSHF or not)
    python bench/compress.py --synthetic record           record-shaped random weights (heavy-tailed, uneven rows)
    options: --compressors lzma6,brotli11,...  --layouts torch_save,planes,...  --json OUT

A state dict goes through the trainer's own functions (unbank_state_dict, quantize_state_dict), so the tensors
are exactly those the trainer's artifact holds; the first rows are the trainer's serialize_artifact itself in its
containers: COMPRESSOR=brotli (torch.save, brotli quality 11), with BYTE_SHUFFLE=1, and COMPRESSOR=ans (each
quantized tensor rANS-coded on its own histogram, the rest brotli), with and without the shuffle. Layouts (all lossless, every row is decoded and compared
byte for byte, or tensor for tensor for `planes`):
  torch_save        torch.save({"w": tensors, "m": meta}), the trainer's container
  torch_save_bshf   the same bytes byte-shuffled as SPEC_0409 §7.6: b"BSHF", 2, even-offset bytes, odd-offset bytes
  grouped           torch.save with the tensors reordered: int8 q tensors, then fp16 scales, then the passthrough ones
  grouped_bshf      grouped, byte-shuffled
  planes            no torch.save: a JSON header, then all 1-byte tensors, then the k-th bytes of all k-byte tensors
                    plane by plane (the even/odd split applied only to the fp16/fp32 data)
Compressors: lzma6 (the trainer's COMPRESSOR=lzma), lzma9e (preset 9 | extreme), brotli11 (quality 11, window
2^22: COMPRESSOR=brotli), brotli11w24 (window 2^24). Run it on the most-trained weights there are: the ranking on
random weights says little.
"""
import argparse
import functools
import importlib.util
import io
import json
import lzma
import struct
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=None)
def trainer_module(path: Path = REPO / "train_gpt.py"):
    spec = importlib.util.spec_from_file_location("train_gpt_for_compress_bench", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def trainer_functions():
    """What this bench takes from the trainer: (unbank_state_dict, quantize_state_dict, serialize_artifact)."""
    module = trainer_module()
    return module.unbank_state_dict, module.quantize_state_dict, module.serialize_artifact


# ---- inputs ----
def synthetic_state(seed: int, layers: int = 11, dim: int = 512, vocab: int = 1024) -> dict:
    """The record's banked state-dict layout (defaults: its shapes: 11 layers, d 512, 8/4 heads, MLP 3x, vocab 1024,
    bigram 1536x128, VE 128 on 2 layers) with random weights: Student-t (df 5) entries of std 0.3, each row scaled by
    a log-normal factor. Calibrated so that int6+lzma6 spends what the record's trained artifact does, ~4.7 bits per
    value (15.8 MB for 27M values): with a smaller std the int6 scale floor (1/31) leaves mostly 0 and +-1. A
    stand-in only: its values are independent, trained weights are not."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # StudentT samples from the global generator
    kv_dim, hidden, t_distribution = dim // 2, 3 * dim, torch.distributions.StudentT(5.0)

    def matrix(*shape):  # df 5 has variance 5/3: scaled to std 0.3, then each row by exp(N(0, 0.3^2))
        rows = torch.exp(0.3 * torch.randn(*shape[:-1], 1, generator=generator))
        return (t_distribution.sample(shape) * 0.3 * (3.0 / 5.0) ** 0.5 * rows).float()
    state = {"skip_weights": torch.rand(layers // 2, dim, generator=generator),
             "qo_bank": matrix(2 * layers, dim, dim), "kv_bank": matrix(2 * layers, kv_dim, dim),
             "mlp_up_bank": matrix(layers, hidden, dim),
             "mlp_down_bank": matrix(layers, dim, hidden),
             "tok_emb.weight": matrix(vocab, dim), "bigram.scale": torch.tensor(0.05),
             "bigram.embed.weight": matrix(3 * vocab // 2, 128),
             "bigram.proj.weight": matrix(dim, 128), "smear.gate": torch.randn(dim, generator=generator)}
    for layer in range(layers):
        state.update({"blocks.%d.attn_scale" % layer: torch.rand(dim, generator=generator),
                      "blocks.%d.mlp_scale" % layer: torch.rand(dim, generator=generator),
                      "blocks.%d.resid_mix" % layer: torch.rand(2, dim, generator=generator),
                      "blocks.%d.attn.q_gain" % layer: 1.5 + torch.rand(8, generator=generator)})
    state.update({"ve_shared.scale": torch.tensor(0.1), "ve_shared.embed.weight": matrix(vocab, 128),
                  "ve_shared.proj.weight": matrix(kv_dim, 128), "ve_layer_scales.0": torch.ones(1),
                  "ve_layer_scales.1": torch.ones(1)})
    return state


def load_artifact(blob: bytes) -> tuple:
    """(tensors, meta) of an artifact in any of the trainer's containers (its own deserialize_artifact)."""
    return trainer_module().deserialize_artifact(blob)


# ---- layouts: (tensors, meta) -> bytes, and back ----
def shuffle(data: bytes) -> bytes:
    """SPEC_0409 §7.6 BSHF: header, stride 2, the even-offset bytes, then the odd-offset bytes."""
    if len(data) < 2:
        return data
    array = np.frombuffer(data, dtype=np.uint8)
    return b"BSHF" + bytes([2]) + array[0::2].tobytes() + array[1::2].tobytes()


def unshuffle(data: bytes) -> bytes:
    if not data.startswith(b"BSHF"):
        return data
    body = np.frombuffer(data, dtype=np.uint8, offset=5)
    out = np.empty(len(body), dtype=np.uint8)
    even = (len(body) + 1) // 2
    out[0::2], out[1::2] = body[:even], body[even:]
    return out.tobytes()


def torch_save(tensors: dict, meta: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save({"w": tensors, "m": meta}, buffer)
    return buffer.getvalue()


def grouped_order(tensors: dict) -> dict:
    """int8 q tensors (int6 kind first, as they come), then fp16 tensors (scales first), then the rest."""
    def rank(item):
        name, tensor = item
        if tensor.dtype == torch.int8:
            return 0
        if tensor.dtype == torch.float16:
            return 1 if name.endswith(".scale") else 2
        return 3
    return dict(sorted(tensors.items(), key=rank))


def planes(tensors: dict, meta: dict) -> bytes:
    """A JSON header (names, dtypes, shapes, meta), then per element size k the k byte planes of all k-byte tensors."""
    order = [(name, str(tensor.dtype).replace("torch.", ""), list(tensor.shape)) for name, tensor in tensors.items()]
    parts = []
    for size in (1, 2, 4, 8):
        chunks = [tensor.reshape(-1).view(torch.uint8).numpy().reshape(-1, size)
                  for tensor in tensors.values() if tensor.element_size() == size]
        if chunks:
            joined = np.concatenate(chunks)
            parts += [np.ascontiguousarray(joined[:, byte]).tobytes() for byte in range(size)]
    header = json.dumps({"order": order, "meta": meta}).encode("utf-8")
    return struct.pack("<I", len(header)) + header + b"".join(parts)


def from_planes(data: bytes) -> tuple:
    (length,) = struct.unpack_from("<I", data)
    header = json.loads(data[4:4 + length].decode("utf-8"))
    dtypes = {name: getattr(torch, dtype) for name, dtype, _ in header["order"]}
    sizes = {name: torch.empty(0, dtype=dtypes[name]).element_size() for name in dtypes}
    counts = {name: int(np.prod(shape)) for name, _, shape in header["order"]}
    offset, tensors = 4 + length, {}
    for size in (1, 2, 4, 8):
        names = [name for name, _, _ in header["order"] if sizes[name] == size]
        total = sum(counts[name] for name in names)
        if not total:
            continue
        joined = np.empty((total, size), dtype=np.uint8)
        for byte in range(size):
            joined[:, byte] = np.frombuffer(data, dtype=np.uint8, count=total, offset=offset)
            offset += total
        start = 0
        for name in names:
            chunk = joined[start:start + counts[name]].copy()
            start += counts[name]
            tensors[name] = torch.from_numpy(chunk.reshape(-1)).view(dtypes[name])
    shapes = {name: shape for name, _, shape in header["order"]}
    return {name: tensors[name].reshape(shapes[name]) for name, _, _ in header["order"]}, header["meta"]


LAYOUTS = {
    "torch_save": lambda tensors, meta: torch_save(tensors, meta),
    "torch_save_bshf": lambda tensors, meta: shuffle(torch_save(tensors, meta)),
    "grouped": lambda tensors, meta: torch_save(grouped_order(tensors), meta),
    "grouped_bshf": lambda tensors, meta: shuffle(torch_save(grouped_order(tensors), meta)),
    "planes": planes,
}


def _brotli(quality: int, lgwin: int):
    import brotli
    return (lambda data: brotli.compress(data, mode=brotli.MODE_GENERIC, quality=quality, lgwin=lgwin),
            brotli.decompress)


COMPRESSORS = {
    "lzma6": lambda: (lambda data: lzma.compress(data, preset=6), lzma.decompress),
    "lzma9e": lambda: (lambda data: lzma.compress(data, preset=9 | lzma.PRESET_EXTREME), lzma.decompress),
    "brotli11": lambda: _brotli(11, 22),
    "brotli11w24": lambda: _brotli(11, 24),
}


def same_tensors(a: dict, b: dict) -> bool:
    return list(a) == list(b) and all(a[name].dtype == b[name].dtype and torch.equal(a[name], b[name]) for name in a)


# The trainer's own containers, (COMPRESSOR, BYTE_SHUFFLE); the first is the reference row.
TRAINER_CONTAINERS = (("brotli", False), ("brotli", True), ("ans", False), ("ans", True))


def measure(tensors: dict, meta: dict, layouts, compressors, serialize_artifact=None) -> list:
    """One row per layout x compressor; first, when given, the trainer's serialize_artifact in each of its
    containers (torch.save and the trainer's reader included in its seconds; ans rows need constriction)."""
    rows = []
    for compressor, byte_shuffle in TRAINER_CONTAINERS if serialize_artifact is not None else ():
        if compressor == "ans" and importlib.util.find_spec("constriction") is None:
            continue
        started = time.perf_counter()
        blob = serialize_artifact(tensors, meta, compressor, byte_shuffle)
        compress_s = time.perf_counter() - started
        started = time.perf_counter()
        back, back_meta = load_artifact(blob)
        decompress_s = time.perf_counter() - started
        if not same_tensors(dict(sorted(back.items())), dict(sorted(tensors.items()))) or back_meta != meta:
            raise AssertionError("the trainer's %s container does not round-trip" % compressor)
        rows.append({"layout": "trainer" + (" BYTE_SHUFFLE=1" if byte_shuffle else ""),
                     "compressor": "COMPRESSOR=" + compressor, "bytes": len(blob), "compress_s": compress_s,
                     "decompress_s": decompress_s})
    for layout in layouts:
        data = LAYOUTS[layout](tensors, meta)
        for name in compressors:
            compress, decompress = COMPRESSORS[name]()
            started = time.perf_counter()
            blob = compress(data)
            compress_s = time.perf_counter() - started
            started = time.perf_counter()
            back = decompress(blob)
            decompress_s = time.perf_counter() - started
            if back != data:
                raise AssertionError("%s + %s does not round-trip" % (layout, name))
            if layout == "planes" and not same_tensors(from_planes(back)[0], tensors):
                raise AssertionError("planes does not give back the tensors")
            rows.append({"layout": layout, "compressor": name, "bytes": len(blob), "raw_bytes": len(data),
                         "compress_s": compress_s, "decompress_s": decompress_s})
            print("%s + %s: %d bytes (%.1f s)" % (layout, name, len(blob), compress_s), file=sys.stderr, flush=True)
    return rows


def print_table(rows: list, title: str) -> None:
    reference = rows[0]["bytes"]
    print(title)
    print("| layout | compressor | bytes | vs first row | compress s | decompress s |")
    print("|---|---|---:|---:|---:|---:|")
    for row in rows:
        print("| %s | %s | %d | %+d | %.2f | %.2f |" % (row["layout"], row["compressor"], row["bytes"],
                                                       row["bytes"] - reference, row["compress_s"],
                                                       row["decompress_s"]))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?",
                        help="a run's logs/<RUN_ID>/final_model.pt (a state dict) or an artifact (.ptz)")
    parser.add_argument("--synthetic", choices=["record"], help="record-shaped random weights instead of a file")
    parser.add_argument("--seed", type=int, default=0, help="seed of --synthetic (default %(default)s)")
    parser.add_argument("--layouts", default=",".join(LAYOUTS), help="comma-separated, of: %s" % ", ".join(LAYOUTS))
    parser.add_argument("--compressors", default="lzma6,brotli11",
                        help="comma-separated, of: %s (default %%(default)s)" % ", ".join(COMPRESSORS))
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    layouts, compressors = args.layouts.split(","), args.compressors.split(",")
    unknown = [name for name in layouts if name not in LAYOUTS] + [n for n in compressors if n not in COMPRESSORS]
    if unknown or (args.input is None) == (args.synthetic is None):
        parser.error("unknown layout/compressor %s" % unknown if unknown else "give an input file or --synthetic")
    if "brotli" in args.compressors and importlib.util.find_spec("brotli") is None:
        parser.error("the brotli compressors need the brotli module (pip install brotli)")
    unbank_state_dict, quantize_state_dict, serialize_artifact = trainer_functions()
    if args.synthetic or not args.input.endswith(".ptz"):
        state = synthetic_state(args.seed) if args.synthetic else torch.load(args.input, map_location="cpu",
                                                                                     weights_only=True)
        tensors, meta = quantize_state_dict(unbank_state_dict(state))
        title = "synthetic record-shaped weights (seed %d)" % args.seed if args.synthetic else args.input
    else:
        tensors, meta = load_artifact(Path(args.input).read_bytes())
        title = args.input
    values = sum(tensor.numel() for tensor in tensors.values())
    rows = measure(tensors, meta, layouts, compressors, serialize_artifact)
    print_table(rows, "%s: %d stored values in %d tensors" % (title, values, len(tensors)))
    if args.json:
        Path(args.json).write_text(json.dumps({"input": title, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
