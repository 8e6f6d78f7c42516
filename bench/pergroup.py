"""COMPRESSOR=pergroup against the 2026-04-27 record's per-group lrzip (SPEC_0427 §9) and brotli: bytes, encode and
decode seconds of each on the same quantized tensors, every row decoded and compared tensor for tensor.

    tools/py bench/pergroup.py --synthetic                        record-size random weights (04-27 shapes)
    tools/py bench/pergroup.py logs/RUN_ID/final_model.int6.ptz   a trained run's artifact (any container)
    options: --json OUT   --no-lrzip

Rows: brotli (COMPRESSOR=brotli: torch.save, brotli q11), brotli+shuffle (BYTE_SHUFFLE=1), lrzip per group (§9.1-
§9.5: the .q tensors of a role across layers, rows of tok_emb/c_q/fc in nearest-neighbour order, column-major,
`lrzip -z -L 9` per group in threads, the rest torch.save + brotli q11 lgwin 24, the orders brotli), ans
(COMPRESSOR=ans, shuffled) and pergroup (COMPRESSOR=pergroup, shuffled: the trainer's container). The lrzip row
needs the `lrzip` binary on PATH (Debian: apt-get install lrzip), else it says so. Then the per-group table:
pergroup's chosen layout (mode, column classes used) and bytes per group against lrzip's. --synthetic: the 04-27
tensors (11 layers, d 512, MLP 4x, vocab 8192), Student-t (df 5) weights with log-normal row and column scales,
quantized as SDClip round-to-nearest (GPTQ with an identity Hessian) at the recipe's bits and k, the sparse gates
int8, LQER on the top 3, fp16 passthroughs. Independent values apart from the scales: no coder finds structure a
trained model's weights may have; run it on one.
"""
import argparse
import concurrent.futures
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parents[1]


def trainer():
    spec = importlib.util.spec_from_file_location("train_gpt", REPO / "train_gpt.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def synthetic_0427(tg, seed=0):
    """(tensors, meta) of record-size 04-27 weights, quantized as the recipe does without Hessians."""
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
    tg.gptq_quantize = lambda w, hess, bits, k: rtn(w, bits, k)  # identity Hessian: GPTQ is round to nearest
    try:
        return tg.quantize_state_dict(flat, h, hessians)
    finally:
        tg.gptq_quantize = original


def rtn(weight, bits, clip_sigmas):
    levels = 2 ** (bits - 1) - 1
    scale = (clip_sigmas * weight.std(dim=1) / levels).clamp_min(1e-10).to(torch.float16)
    return torch.clamp(torch.round(weight / scale.float()[:, None]), -levels, levels).to(torch.int8), scale


def lrzip_groups(tg, tensors, chain):
    """§9.1-§9.2: {group: (names, orders or None)} in the record's order; the .q tensors of its six roles + tok_emb."""
    roles = ["tok_emb.weight.q"] + ["%s.weight.q" % r for r in
                                    ("attn.c_k", "attn.c_q", "attn.c_v", "attn.proj", "mlp.fc", "mlp.proj")]
    groups = {}
    for role in roles:
        names = [n for n in tensors if n == role or (n.startswith("blocks.") and n.split(".", 2)[2] == role)]
        if names:
            orders = ([chain(tensors[n].numpy().astype(np.int32)) for n in names]
                      if role in tg.HOT_GROUPS else None)
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
        parts = []
        for i, name in enumerate(names):
            matrix = tensors[name].numpy()
            parts.append(np.ascontiguousarray((matrix if orders is None else matrix[orders[i]]).T).tobytes())
        blobs.append(b"".join(parts))
    with concurrent.futures.ThreadPoolExecutor(len(blobs)) as pool:
        streams = list(pool.map(lambda b: run_lrzip(["-z", "-L", "9"], b), blobs))
    coded = {n for names, _ in groups.values() for n in names}
    buffer = io.BytesIO()
    torch.save({"w": {n: t for n, t in tensors.items() if n not in coded}, "m": meta,
                "shapes": {n: tuple(tensors[n].shape) for n in coded}}, buffer)
    rest = brotli.compress(buffer.getvalue(), quality=11, lgwin=24)
    perms = np.concatenate([np.stack(o).ravel() for _, o in groups.values() if o is not None]).astype("<u2")
    perm_blob = brotli.compress(perms.tobytes(), quality=11)
    return streams, rest, perm_blob, groups


def lrzip_decode(tg, streams, rest, perm_blob, groups):
    import brotli
    with concurrent.futures.ThreadPoolExecutor(len(streams)) as pool:
        blobs = list(pool.map(lambda s: run_lrzip(["-d"], s), streams))
    payload = torch.load(io.BytesIO(brotli.decompress(rest)), weights_only=True)
    tensors, perms, used = dict(payload["w"]), np.frombuffer(brotli.decompress(perm_blob), "<u2"), 0
    for blob, (names, orders) in zip(blobs, groups.values()):
        offset = 0
        for i, name in enumerate(names):
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


def same(a, b):
    return a.keys() == b.keys() and all(a[n].dtype == b[n].dtype and torch.equal(a[n], b[n]) for n in a)


def timed(function, *args):
    started = time.perf_counter()
    result = function(*args)
    return result, time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?", help="an artifact (.ptz) of any container")
    parser.add_argument("--synthetic", action="store_true", help="record-size 04-27 random weights")
    parser.add_argument("--no-lrzip", action="store_true", help="skip the lrzip row")
    parser.add_argument("--no-brotli", action="store_true", help="skip the two brotli rows (minutes on a slow CPU)")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    if (args.input is None) == (not args.synthetic):
        parser.error("give an artifact file or --synthetic")
    tg = trainer()
    if args.synthetic:
        (tensors, meta), seconds = timed(synthetic_0427, tg)
        title = "synthetic 04-27 record-size weights (seed 0; quantized in %.0f s)" % seconds
    else:
        tensors, meta = tg.deserialize_artifact(Path(args.input).read_bytes(), args.input)
        title = args.input
    rows, chains, uncached = [], {}, tg.nearest_neighbour_order
    # our row computes each hot matrix's nearest-neighbour order; the per-group table below reuses it (~30 s on a
    # 2-core CPU), the lrzip row computes its own (uncached) as the record does
    tg.nearest_neighbour_order = lambda m: chains[m.tobytes()] if m.tobytes() in chains else chains.setdefault(
        m.tobytes(), uncached(m))
    print("%s: %d stored values in %d tensors; %d torch threads; encoding..." % (
        title, sum(t.numel() for t in tensors.values()), len(tensors), torch.get_num_threads()), flush=True)
    for label, compressor, shuffle in (("brotli", "brotli", False), ("brotli+shuffle", "brotli", True),
                                       ("ans+shuffle", "ans", True), ("pergroup+shuffle (ours)", "pergroup", True)
                                       )[2 * args.no_brotli:]:
        blob, encode_s = timed(tg.serialize_artifact, tensors, meta, compressor, shuffle)
        (back, back_meta), decode_s = timed(tg.deserialize_artifact, blob)
        assert same(back, tensors) and back_meta == meta, label
        rows.append({"container": label, "bytes": len(blob), "encode_s": encode_s, "decode_s": decode_s})
        print("  %s: %d bytes, encode %.1f s, decode %.1f s" % (label, len(blob), encode_s, decode_s), flush=True)
    lrzip_bytes = {}
    if args.no_lrzip or shutil.which("lrzip") is None:
        print("lrzip row skipped: %s" % ("--no-lrzip" if args.no_lrzip else "no lrzip binary on PATH (apt-get "
                                                                             "install lrzip)"))
    else:
        (streams, rest, perm_blob, groups), encode_s = timed(lrzip_encode, tg, tensors, meta, uncached)
        (back, back_meta), decode_s = timed(lrzip_decode, tg, streams, rest, perm_blob, groups)
        assert same(back, tensors) and back_meta == meta, "lrzip"
        size = 6 + 4 * (len(streams) + 2) + sum(map(len, streams)) + len(rest) + len(perm_blob)  # §9.5's framing
        rows.insert(2, {"container": "lrzip -z -L 9 per group (04-27 record)", "bytes": size, "encode_s": encode_s,
                        "decode_s": decode_s})
        lrzip_bytes = {names[0]: len(s) for s, (names, _) in zip(streams, groups.values())}
        lrzip_bytes.update(rest=len(rest), orders=len(perm_blob))
    print("\n%s\n" % title)
    print("| container | bytes | vs %s | encode s | decode s |\n|---|---:|---:|---:|---:|" % rows[0]["container"])
    for row in rows:
        print("| %s | %d | %+.2f%% | %.1f | %.1f |" % (row["container"], row["bytes"],
                                                    100 * (row["bytes"] / rows[0]["bytes"] - 1), row["encode_s"],
                                                    row["decode_s"]))
    payload = {"w": dict(tensors), "m": meta}
    streams = tg.encode_pergroup(payload)
    print("\n| group (pergroup) | layers x rows x cols | mode | column classes | NN order | our bytes | lrzip bytes |")
    print("|---|---|---:|---:|---|---:|---:|")
    position = 0
    for names, shape, low, mode, classes, counts, words, order in payload["g"]:
        ours = sum(len(s) for s in streams[position:position + len(words)])
        position += len(words)
        print("| %s | %s | %d | %s | %s | %d | %s |" % (names[0], "x".join(map(str, shape)), mode,
                                                        "-" if classes is None else int(classes.max()) + 1,
                                                        "yes" if order is not None else "no", ours,
                                                   lrzip_bytes.get(names[0], "-")))
    if args.json:
        Path(args.json).write_text(json.dumps({"input": title, "rows": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
