"""Issue 35: the RoPE table of RECIPE=2026-04-09 (T = 2048, ROPE_BF16=1) as the record's first compiled forward
builds it, against tables computed eagerly with explicit roundings, and against this trainer's tables.

The record (SPEC_0409 §0.7) holds θ in a buffer that the model's bf16 cast rounded, takes positions from an arange
in θ's dtype (bf16), and builds cos/sin of their outer product inside its first compiled forward, cached in bf16.
`record_like` below is that computation; compiled, the backend decides which of the bf16 roundings survive. Each
variant names what is rounded to bf16 (positions, θ, the angle); cos/sin are then rounded to bf16 as the cache is.
Prints one JSON object: which variants equal the compiled record table bit for bit (and max |Δ| otherwise), and
whether this trainer's rotary_tables(bf16=True) / the table GPT uses equals it.
  python bench/rope_tables.py [--out DIR]     (CUDA if available, else CPU)"""
import argparse
import importlib.util
import json
import os
import sys

import torch

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T, ROPE_DIMS, HEAD_DIM, BASE = 2048, 16, 64, 10000.0


def load_trainer():
    spec = importlib.util.spec_from_file_location("train_gpt", os.path.join(ROOT, "train_gpt.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules["train_gpt"] = module
    spec.loader.exec_module(module)
    return module


def record_like(inv_freq: torch.Tensor, seq_len: int):
    positions = torch.arange(seq_len, device=inv_freq.device, dtype=inv_freq.dtype)
    angles = torch.outer(positions, inv_freq)
    return angles.cos().to(torch.bfloat16), angles.sin().to(torch.bfloat16)


def variants(device) -> dict:
    theta32 = BASE ** (-torch.arange(0, ROPE_DIMS, 2, device=device, dtype=torch.float32) / ROPE_DIMS)
    theta16 = theta32.bfloat16().float()
    pos32 = torch.arange(T, device=device, dtype=torch.float32)
    pos16 = torch.arange(T, device=device, dtype=torch.bfloat16).float()
    angles = {"pos_bf16 theta_bf16 angle_fp32": torch.outer(pos16, theta16),
              "pos_bf16 theta_bf16 angle_bf16": torch.outer(pos16, theta16).bfloat16().float(),
              "pos_bf16 theta_fp32 angle_fp32": torch.outer(pos16, theta32),
              "pos_fp32 theta_bf16 angle_fp32": torch.outer(pos32, theta16),
              "all fp32": torch.outer(pos32, theta32)}
    return {name: (a.cos().bfloat16(), a.sin().bfloat16()) for name, a in angles.items()}


def compare(a, b) -> dict:
    diff = max((x.float() - y.float()).abs().max().item() for x, y in zip(a, b))
    return {"equal": all(bool(torch.equal(x, y)) for x, y in zip(a, b)), "max_abs_diff": diff}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    tg = load_trainer()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    theta = (BASE ** (-torch.arange(0, ROPE_DIMS, 2, device=device, dtype=torch.float32) / ROPE_DIMS)).bfloat16()
    compiled = torch.compile(record_like, fullgraph=True, dynamic=False)(theta, T)
    eager = record_like(theta, T)
    cos, sin, _ = tg.rotary_tables(T, HEAD_DIM, ROPE_DIMS, BASE, device, torch.float32, T, True)
    ours = (cos[:, :ROPE_DIMS // 2].bfloat16(), sin[:, :ROPE_DIMS // 2].bfloat16())
    report = {"device": torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu", "torch": torch.__version__,
              "record_compiled_vs_record_eager": compare(compiled, eager),
              "record_compiled_vs_variant": {name: compare(compiled, v) for name, v in variants(device).items()},
              "record_compiled_vs_trainer_rotary_tables_bf16": compare(compiled, ours)}
    print(json.dumps(report, indent=1))
    if args.out:
        torch.save({"compiled": [t.cpu() for t in compiled], "eager": [t.cpu() for t in eager]},
                   os.path.join(args.out, "rope_tables.pt"))


if __name__ == "__main__":
    main()
