"""How many bytes does each artifact container take, and how fast does it encode and decode? On the same quantized
tensors: the trainer's own serialize_artifact in each container asked for (COMPRESSOR x BYTE_SHUFFLE) and, as the
reference, the 2026-04-27 record's per-group lrzip (SPEC_0427 §9); every row is decoded and compared tensor for
tensor. With a pergroup row, a per-group table follows: the layout pergroup chose (mode, column classes, nearest-
neighbour order) and its bytes next to lrzip's.

    tools/py bench/compress.py logs/RUN_ID/final_model.int6.ptz   an artifact's tensors (any container)
    tools/py bench/compress.py logs/RUN_ID/final_model.pt          a state dict, rowclip-quantized (no Hessians)
    tools/py bench/compress.py --synthetic 0427                    record-size random weights (0323 or 0427 shapes)
    options: --containers lzma,brotli,brotli+shuffle,pergroup,pergroup+shuffle,lrzip   --json OUT

lrzip: the .q tensors of a role across layers, rows of tok_emb/c_q/fc in nearest-neighbour order, column-major,
`lrzip -z -L 9` per group in threads, the rest torch.save + brotli q11 lgwin 24, the orders brotli; it needs the
`lrzip` binary on PATH (Debian: apt-get install lrzip), else the row says so. --synthetic 0323: the record's banked
state dict (11 layers, d 512, MLP 3x, vocab 1024, bigram, VE) with Student-t (df 5) entries of std 0.3 and
log-normal row scales (int6 + lzma then spends ~4.7 bits per value, as the record's trained artifact), quantized by
rowclip. --synthetic 0427: the 04-27 tensors (11 layers, d 512, MLP 4x, vocab 8192), Student-t weights with
log-normal row and column scales, quantized as SDClip round-to-nearest (GPTQ with an identity Hessian) at the
recipe's bits and k. Their values are independent apart from the scales: no coder finds structure that trained
weights have; rank containers on a trained artifact."""
import argparse, concurrent.futures, importlib.util, io, json, os, shutil, subprocess, sys, tempfile, time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import load_trainer  # noqa: E402

CONTAINERS = {"lzma": ("lzma", False), "brotli": ("brotli", False), "brotli+shuffle": ("brotli", True),
              "pergroup": ("pergroup", False), "pergroup+shuffle": ("pergroup", True)}
NEEDS = {"brotli": "brotli", "pergroup": "constriction"}


# ---- inputs ----
def synthetic_0323(tg, seed: int = 0, layers: int = 11, dim: int = 512, vocab: int = 1024) -> tuple:
    """(tensors, meta) of the 2026-03-23 record's banked state-dict layout with random weights, rowclip-quantized."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # StudentT samples from the global generator
    kv_dim, hidden, t_distribution = dim // 2, 3 * dim, torch.distributions.StudentT(5.0)

    def matrix(*shape):  # df 5 has variance 5/3: scaled to std 0.3, then each row by exp(N(0, 0.3^2))
        rows = torch.exp(0.3 * torch.randn(*shape[:-1], 1, generator=generator))
        return (t_distribution.sample(shape) * 0.3 * (3.0 / 5.0) ** 0.5 * rows).float()
    state = {"skip_weights": torch.rand(layers // 2, dim, generator=generator),
             "qo_bank": matrix(2 * layers, dim, dim), "kv_bank": matrix(2 * layers, kv_dim, dim),
             "mlp_up_bank": matrix(layers, hidden, dim), "mlp_down_bank": matrix(layers, dim, hidden),
             "tok_emb.weight": matrix(vocab, dim), "bigram.scale": torch.tensor(0.05),
             "bigram.embed.weight": matrix(3 * vocab // 2, 128), "bigram.proj.weight": matrix(dim, 128),
             "smear.gate": torch.randn(dim, generator=generator), "ve_shared.scale": torch.tensor(0.1),
             "ve_shared.embed.weight": matrix(vocab, 128), "ve_shared.proj.weight": matrix(kv_dim, 128),
             "ve_layer_scales.0": torch.ones(1), "ve_layer_scales.1": torch.ones(1)}
    for layer in range(layers):
        state.update({"blocks.%d.attn_scale" % layer: torch.rand(dim, generator=generator),
                      "blocks.%d.mlp_scale" % layer: torch.rand(dim, generator=generator),
                      "blocks.%d.resid_mix" % layer: torch.rand(2, dim, generator=generator),
                      "blocks.%d.attn.q_gain" % layer: 1.5 + torch.rand(8, generator=generator)})
    return tg.quantize_state_dict(tg.unbank_state_dict(state))


def synthetic_0427(tg, seed: int = 0) -> tuple:
    """(tensors, meta) of record-size 04-27 weights, quantized as the recipe does but without Hessians."""
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    t_dist = torch.distributions.StudentT(5.0)

    def matrix(rows, cols):
        row = torch.exp(0.3 * torch.randn(rows, 1, generator=generator))
        col = torch.exp(0.3 * torch.randn(1, cols, generator=generator))
        return t_dist.sample((rows, cols)) * 0.02 * row * col
    flat = {"tok_emb.weight": matrix(8192, 512), "smear_gate.weight": torch.zeros(1, 12),
            "skip_weights": torch.rand(5, 512, generator=generator)}
    for i in range(11):
        for part, shape in {"attn.c_q": (512, 512), "attn.c_k": (256, 512), "attn.c_v": (256, 512),
                            "attn.proj": (512, 512), "mlp.fc": (2048, 512), "mlp.proj": (512, 2048)}.items():
            flat[f"blocks.{i}.{part}.weight"] = matrix(*shape)
        flat[f"blocks.{i}.attn.attn_gate_w"] = torch.randn(8, 12, generator=generator)
        flat[f"blocks.{i}.attn_scale"] = torch.rand(512, generator=generator)
    h = tg.Hyperparameters.from_env({"RECIPE": "2026-04-27"})
    hessians = {name: torch.eye(t.shape[1]) for name, t in flat.items() if t.numel() > tg.PASSTHROUGH_MAX_NUMEL}
    original = tg.gptq_quantize
    tg.gptq_quantize = lambda w, hess, bits, k: round_to_nearest(w, bits, k)  # identity Hessian
    try:
        return tg.quantize_state_dict(flat, h, hessians)
    finally:
        tg.gptq_quantize = original


def round_to_nearest(weight, bits, clip_sigmas):
    levels = 2 ** (bits - 1) - 1
    scale = (clip_sigmas * weight.std(dim=1) / levels).clamp_min(1e-10).to(torch.float16)
    return torch.clamp(torch.round(weight / scale.float()[:, None]), -levels, levels).to(torch.int8), scale


# ---- the 2026-04-27 record's per-group lrzip ----
def lrzip_groups(tg, tensors, chain):
    """§9.1-§9.2: {group: (names, orders or None)} in the record's order: the .q tensors of six roles + tok_emb."""
    roles = ["tok_emb.weight.q"] + ["%s.weight.q" % r for r in
                                    ("attn.c_k", "attn.c_q", "attn.c_v", "attn.proj", "mlp.fc", "mlp.proj")]
    groups = {}
    for role in roles:
        names = [n for n in tensors if n == role or (n.startswith("blocks.") and n.split(".", 2)[2] == role)]
        if names:
            orders = [chain(tensors[n].numpy().astype(np.int32)) for n in names] if role in tg.HOT_GROUPS else None
            groups[role] = (names, orders)
    return groups


def run_lrzip(args, data: bytes) -> bytes:
    with tempfile.TemporaryDirectory() as folder:
        source, target = os.path.join(folder, "in"), os.path.join(folder, "out")
        Path(source).write_bytes(data)
        subprocess.run(["lrzip", *args, "-q", "-f", "-o", target, source], check=True, capture_output=True)
        return Path(target).read_bytes()


def lrzip_encode(tg, tensors, meta, chain):
    import brotli
    groups = lrzip_groups(tg, tensors, chain)
    blobs = []
    for names, orders in groups.values():
        parts = [np.ascontiguousarray((tensors[name].numpy() if orders is None else
                                       tensors[name].numpy()[orders[i]]).T).tobytes() for i, name in enumerate(names)]
        blobs.append(b"".join(parts))
    with concurrent.futures.ThreadPoolExecutor(len(blobs)) as pool:
        streams = list(pool.map(lambda b: run_lrzip(["-z", "-L", "9"], b), blobs))
    coded = {n for names, _ in groups.values() for n in names}
    buffer = io.BytesIO()
    torch.save({"w": {n: t for n, t in tensors.items() if n not in coded}, "m": meta,
                "shapes": {n: tuple(tensors[n].shape) for n in coded}}, buffer)
    rest = brotli.compress(buffer.getvalue(), quality=11, lgwin=24)
    perms = np.concatenate([np.stack(o).ravel() for _, o in groups.values() if o is not None]).astype("<u2")
    return streams, rest, brotli.compress(perms.tobytes(), quality=11), groups


def lrzip_decode(streams, rest, perm_blob, groups):
    import brotli
    with concurrent.futures.ThreadPoolExecutor(len(streams)) as pool:
        blobs = list(pool.map(lambda s: run_lrzip(["-d"], s), streams))
    payload = torch.load(io.BytesIO(brotli.decompress(rest)), weights_only=True)
    tensors, perms, used = dict(payload["w"]), np.frombuffer(brotli.decompress(perm_blob), "<u2"), 0
    for blob, (names, orders) in zip(blobs, groups.values()):
        offset = 0
        for name in names:
            rows, cols = payload["shapes"][name]
            matrix = np.frombuffer(blob, np.int8, rows * cols, offset).reshape(cols, rows).T
            offset += rows * cols
            if orders is not None:
                order = perms[used:used + rows].astype(np.int64)
                used += rows
                matrix, unordered = np.empty_like(matrix), matrix
                matrix[order] = unordered
            tensors[name] = torch.from_numpy(np.ascontiguousarray(matrix))
    return tensors, payload["m"]


# ---- measuring ----
def same_tensors(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[n].dtype == b[n].dtype and torch.equal(a[n], b[n]) for n in a)


def timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


def measure(tg, tensors: dict, meta: dict, containers, chain=None) -> tuple:
    """(rows, lrzip bytes per group): one row per container, each decoded and compared; a container whose module or
    binary is missing gives a row that says so (bytes None). chain: lrzip's nearest-neighbour order (default the
    trainer's)."""
    rows, lrzip_bytes = [], {}
    for label in containers:
        compressor, byte_shuffle = CONTAINERS.get(label, (label, False))
        missing = NEEDS.get(compressor)
        missing = missing if missing and importlib.util.find_spec(missing) is None else None
        if label == "lrzip" and shutil.which("lrzip") is None:
            missing = "the lrzip binary (apt-get install lrzip)"
        if missing:
            rows.append({"container": label, "bytes": None, "skipped": "no " + missing})
            continue
        if label == "lrzip":
            (streams, rest, perm_blob, groups), encode_s = timed(lrzip_encode, tg, tensors, meta,
                                                                 chain or tg.nearest_neighbour_order)
            (back, back_meta), decode_s = timed(lrzip_decode, streams, rest, perm_blob, groups)
            size = 6 + 4 * (len(streams) + 2) + sum(map(len, streams)) + len(rest) + len(perm_blob)  # §9.5's framing
            lrzip_bytes = {names[0]: len(s) for s, (names, _) in zip(streams, groups.values())}
        else:
            blob, encode_s = timed(tg.serialize_artifact, tensors, meta, compressor, byte_shuffle)
            (back, back_meta), decode_s = timed(tg.deserialize_artifact, blob)
            size = len(blob)
        if not same_tensors(dict(sorted(back.items())), dict(sorted(tensors.items()))) or back_meta != meta:
            raise AssertionError("%s does not give back the tensors" % label)
        rows.append({"container": label, "bytes": size, "encode_s": encode_s, "decode_s": decode_s})
        print("  %s: %d bytes, encode %.1f s, decode %.1f s" % (label, size, encode_s, decode_s), flush=True)
    return rows, lrzip_bytes


def print_tables(tg, tensors, meta, rows, lrzip_bytes, title) -> None:
    reference = next((row["bytes"] for row in rows if row["bytes"]), None)
    print("\n%s\n\n| container | bytes | vs first row | encode s | decode s |\n|---|---:|---:|---:|---:|" % title)
    for row in rows:
        if row["bytes"] is None:
            print("| %s | skipped: %s | | | |" % (row["container"], row["skipped"]))
        else:
            print("| %s | %d | %+.2f%% | %.1f | %.1f |" % (row["container"], row["bytes"],
                                                        100 * (row["bytes"] / reference - 1), row["encode_s"],
                                                        row["decode_s"]))
    if not any(row["container"] == "pergroup+shuffle" and row["bytes"] for row in rows):
        return
    payload = {"w": dict(tensors), "m": meta}
    streams = tg.encode_pergroup(payload)
    print("\n| group (pergroup) | layers x rows x cols | mode | column classes | NN order | our bytes | lrzip bytes |")
    print("|---|---|---:|---:|---|---:|---:|")
    position = 0
    for names, shape, low, mode, classes, counts, words, order in payload["g"]:
        ours = sum(len(s) for s in streams[position:position + len(words)])
        position += len(words)
        print("| %s | %s | %d | %s | %s | %d | %s |" % (
            names[0], "x".join(map(str, shape)), mode, "-" if classes is None else int(classes.max()) + 1,
            "yes" if order is not None else "no", ours, lrzip_bytes.get(names[0], "-")))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?", help="an artifact (.ptz, any container) or a state dict (.pt)")
    parser.add_argument("--synthetic", choices=["0323", "0427"], help="record-size random weights instead of a file")
    parser.add_argument("--containers", default="brotli,brotli+shuffle,pergroup+shuffle,lrzip",
                        help="comma-separated, of: %s, lrzip (default %%(default)s)" % ", ".join(CONTAINERS))
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    containers = [name for name in args.containers.split(",") if name]
    unknown = [name for name in containers if name not in CONTAINERS and name != "lrzip"]
    if unknown or (args.input is None) == (args.synthetic is None):
        parser.error("unknown container %s" % unknown if unknown else "give an input file or --synthetic")
    tg = load_trainer()
    # the pergroup rows compute each hot matrix's nearest-neighbour order once (~30 s on 2 cores) and the per-group
    # table reuses it; the lrzip row computes its own (uncached), as the record does
    chains, uncached = {}, tg.nearest_neighbour_order
    tg.nearest_neighbour_order = lambda m: chains[m.tobytes()] if m.tobytes() in chains else chains.setdefault(
        m.tobytes(), uncached(m))
    if args.synthetic:
        (tensors, meta), seconds = timed(synthetic_0323 if args.synthetic == "0323" else synthetic_0427, tg)
        title = "synthetic %s record-size weights (seed 0; quantized in %.0f s)" % (args.synthetic, seconds)
    elif args.input.endswith(".ptz"):
        tensors, meta = tg.deserialize_artifact(Path(args.input).read_bytes(), args.input)
        title = args.input
    else:  # GPTQ needs the calibration's Hessians: a GPTQ recipe's tensors come from its artifact
        state = torch.load(args.input, map_location="cpu", weights_only=True)
        tensors, meta = tg.quantize_state_dict(tg.unbank_state_dict(state))
        title = "%s (rowclip)" % args.input
    print("%s: %d stored values in %d tensors; %d torch threads; encoding..." % (
        title, sum(t.numel() for t in tensors.values()), len(tensors), torch.get_num_threads()), flush=True)
    rows, lrzip_bytes = measure(tg, tensors, meta, containers, uncached)
    print_tables(tg, tensors, meta, rows, lrzip_bytes, title)
    if args.json:
        Path(args.json).write_text(json.dumps({"input": title, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
