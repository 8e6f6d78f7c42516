"""Wall time of the GPTQ solve (train_gpt.gptq_quantize, QUANTIZER=gptq) at the 2026-04-09 record's shapes:
per layer c_q 512x512, c_k and c_v 256x512, attn.proj 512x512, mlp.fc 2048x512, mlp.proj 512x2048 (int6,
k = 12.85), and tok_emb 8192x512 once (int8, k = 20). The Hessians are X^T X of synthetic correlated inputs: the
solve's cost depends on the shapes only. One row per shape: ms per call (median of --repeats), calls per model,
seconds per model; then the total. With --device cuda each solve is also run on the CPU, and the table adds how
many q entries differ (fp32 roundings that land on the other side of a tie, and what follows from them in the
row) and both Hessian-weighted errors tr((W - W_hat) H (W - W_hat)^T).

  python bench/gptq_solve.py                 # CPU, 1 thread: torchrun sets OMP_NUM_THREADS=1 for every rank
  python bench/gptq_solve.py --threads 8
  python bench/gptq_solve.py --device cuda
"""
import argparse, statistics, sys, time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, load_trainer  # noqa: E402

# name -> (rows, cols, bits, clip sigmas, calls per model)
RECORD_SHAPES = {"attn.c_q": (512, 512, 6, 12.85, 11), "attn.c_k": (256, 512, 6, 12.85, 11),
                 "attn.c_v": (256, 512, 6, 12.85, 11), "attn.proj": (512, 512, 6, 12.85, 11),
                 "mlp.fc": (2048, 512, 6, 12.85, 11), "mlp.proj": (512, 2048, 6, 12.85, 11),
                 "tok_emb": (8192, 512, 8, 20.0, 1)}


def synthetic_inputs(rows: int, cols: int, seed: int) -> tuple:
    """A weight with Muon-trained-like scale and the X^T X of 4 * cols correlated input rows."""
    generator = torch.Generator().manual_seed(seed)
    mixing = torch.eye(cols) + 0.5 * torch.randn(cols, cols, generator=generator) / cols ** 0.5
    inputs = torch.randn(4 * cols, cols, generator=generator) @ mixing
    return torch.randn(rows, cols, generator=generator) * cols ** -0.5, inputs.T @ inputs


def weighted_error(weight, q, scale, hessian) -> float:
    delta = (weight - q.float() * scale.float()[:, None]).double()
    return float(((delta @ hessian.double()) * delta).sum())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--layers", type=int, default=11, help="calls per model of the per-layer shapes")
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("--device cuda needs a CUDA GPU")
    torch.set_num_threads(args.threads)
    tg = load_trainer(args.module, needed=("gptq_quantize",))
    device = torch.device(args.device)
    print(f"device:{args.device} threads:{args.threads} torch:{torch.__version__} repeats:{args.repeats}")
    header = f"{'tensor':10} {'shape':>9} {'bits':>4} {'ms/call':>9} {'calls':>5} {'s/model':>8}"
    if device.type == "cuda":
        header += f" {'q differ':>9} {'err cuda':>10} {'err cpu':>10}"
    print(header)
    total = 0.0
    for seed, (name, (rows, cols, bits, sigmas, calls)) in enumerate(RECORD_SHAPES.items()):
        calls = calls if name == "tok_emb" else args.layers
        weight, hessian = synthetic_inputs(rows, cols, seed)
        weight_d, hessian_d = weight.to(device), hessian.to(device)
        times = []
        for _ in range(args.repeats):
            if device.type == "cuda":
                torch.cuda.synchronize()
            start = time.perf_counter()
            q, scale = tg.gptq_quantize(weight_d, hessian_d, bits, sigmas)
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - start)
        seconds = statistics.median(times)
        total += seconds * calls
        line = f"{name:10} {rows:>4}x{cols:<4} {bits:>4} {1000 * seconds:>9.1f} {calls:>5} {seconds * calls:>8.2f}"
        if device.type == "cuda":
            q_cpu, scale_cpu = tg.gptq_quantize(weight, hessian, bits, sigmas)
            differ = int((q.cpu() != q_cpu).sum())
            line += (f" {differ:>9} {weighted_error(weight, q.cpu(), scale.cpu(), hessian):>10.4g}"
                     f" {weighted_error(weight, q_cpu, scale_cpu, hessian):>10.4g}")
        print(line, flush=True)
    print(f"total_seconds_per_model:{total:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
