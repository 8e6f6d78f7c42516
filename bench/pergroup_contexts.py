"""Estimated bytes (entropy under per-context histograms + ~2 B per table entry + side information: classes at
log2(k) bits per column or row, 2 B per row of a permutation) of every pergroup group under candidate contexts, to
choose what COMPRESSOR=pergroup codes with. Only estimates: the real sizes come from bench/pergroup.py.

    tools/py bench/pergroup_contexts.py --synthetic          record-size 04-27 random weights (bench/pergroup.py's)
    tools/py bench/pergroup_contexts.py ARTIFACT.ptz         a trained run's artifact (any container)

Columns: one (one histogram), above (|value above| <= 3, pergroup mode 1), colQ8/colQ16 (column classes by quantile
of mean |q|), col8/col16 (the trainer's column_classes: quantile, then refined), row8 (row classes), col8xrow4,
col8xabove, col8xleft (|value to the left| <= 3), and for the hot groups nn+value (rows in nearest-neighbour order,
context the value above clipped to +-3: mode 3 on the chain) and nn+col8xvalue.
"""
import argparse
import re
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pergroup  # noqa: E402


def size(values, context, side_bits=0.0):
    shifted = (values - values.min()).ravel()
    bins, context = int(shifted.max()) + 1, context.ravel().astype(np.int64)
    counts = np.bincount(context * bins + shifted, minlength=(context.max() + 1) * bins).reshape(-1, bins)
    p = counts / np.maximum(counts.sum(axis=1, keepdims=True), 1)
    return -(counts * np.log2(np.where(counts > 0, p, 1.0))).sum() / 8 + 2 * np.count_nonzero(counts) + side_bits / 8


def quantile_classes(stat, k):
    return np.searchsorted(np.quantile(stat, np.linspace(0, 1, k + 1)[1:-1]), stat)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("input", nargs="?")
    parser.add_argument("--synthetic", action="store_true")
    args = parser.parse_args(argv)
    tg = pergroup.trainer()
    if args.synthetic:
        tensors, _ = pergroup.synthetic_0427(tg)
    else:
        tensors, _ = tg.deserialize_artifact(Path(args.input).read_bytes(), args.input)
    groups, totals = {}, {}
    for name, tensor in tensors.items():
        if name.endswith(".q") and tensor.ndim == 2 and str(tensor.dtype) == "torch.int8":
            groups.setdefault((re.sub(r"^blocks\.\d+\.", "", name), tuple(tensor.shape)), []).append(name)
    for (role, _), names in groups.items():
        x = np.stack([tensors[name].numpy().astype(np.int32) for name in names])
        layers, rows, cols = x.shape
        above = np.minimum(np.abs(np.concatenate([x[:, :1] * 0, x[:, :-1]], axis=1)), 3)
        left = np.minimum(np.abs(np.concatenate([x[:, :, :1] * 0, x[:, :, :-1]], axis=2)), 3)
        col_stat, row_stat = np.abs(x).mean(axis=1), np.abs(x).mean(axis=2)
        classes = dict(zip((1, 2, 4, 8, 16), (c for c, _ in tg.column_classes(x, int(x.max() - x.min()) + 1))))
        col8 = classes[8].astype(np.int64)[:, None]
        row4 = quantile_classes(row_stat, 4)[:, :, None]
        result = {"one": size(x, x * 0), "above": size(x, above)}
        for k in (8, 16):
            result[f"colQ{k}"] = size(x, quantile_classes(col_stat, k)[:, None] + x * 0, layers * cols * np.log2(k))
            result[f"col{k}"] = size(x, classes[k][:, None] + x * 0, layers * cols * np.log2(k))
        result["row8"] = size(x, quantile_classes(row_stat, 8)[:, :, None] + x * 0, layers * rows * 3)
        result["col8xrow4"] = size(x, col8 * 4 + row4, layers * (cols * 3 + rows * 2))
        result["col8xabove"] = size(x, col8 * 4 + above, layers * cols * 3)
        result["col8xleft"] = size(x, col8 * 4 + left, layers * cols * 3)
        if role in tg.HOT_GROUPS:
            order = np.stack([tg.nearest_neighbour_order(matrix) for matrix in x])
            chained = np.take_along_axis(x, order[:, :, None], axis=1)
            value = np.clip(np.concatenate([chained[:, :1] * 0, chained[:, :-1]], axis=1), -3, 3) + 3
            result["nn+value"] = size(chained, value, 16 * order.size)
            result["nn+col8xvalue"] = size(chained, col8 * 7 + value, 16 * order.size + layers * cols * 3)
        print("%s %s: %s; least %s" % (role, "x".join(map(str, x.shape)), ", ".join(
            "%s %d" % item for item in result.items()), min(result, key=result.get)), flush=True)
        for key in set(result) | set(totals):
            totals[key] = totals.get(key, 0) + result.get(key, result["one"])
    print("total (a group without a column: its one-histogram size): " + ", ".join(
        "%s %d" % (key, totals[key]) for key in sorted(totals, key=totals.get)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
