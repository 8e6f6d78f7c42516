"""The fused MLP op of train_gpt.py (LeakyReLU(0.5)^2 inside the up-projection GEMM's epilogue, its derivative
inside the backward d_act GEMM's) against the compiled PyTorch form it replaces, at the record's micro-batch shape
(48 x 2048 tokens, d=512, hidden 1536), bf16. Prints three tables:
  1. each Triton GEMM alone per launch configuration (GPU time, TFLOP/s), next to cuBLAS doing the bare GEMM and
     the shipped up-projection storing act only (no h, as in inference);
  2. the whole op with the fastest configurations vs the compiled PyTorch form: forward and forward+backward GPU
     time per call;
  3. the largest differences to an fp32 reference computed from the same bf16 inputs, for both forms (the fused
     op also inside torch.compile, which must keep the kernels).

  python bench/mlp_kernel.py
  python bench/mlp_kernel.py --configs 128x128x64x8x3x0 128x256x64x8x3x1
      # BLOCK_M x BLOCK_N x BLOCK_K x warps x stages x programs per SM (0: one program per tile)
"""
import argparse, sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from qk_kernel import timed_ms  # noqa: E402
from harness import REPO, load_trainer  # noqa: E402

DEFAULT_CONFIGS = ["128x128x64x8x3x0", "128x128x64x8x3x1", "128x128x64x8x3x2", "128x128x64x8x4x0",
                   "128x256x64x8x3x0", "128x256x64x8x3x1", "256x128x64x8x3x1", "128x128x64x4x3x2",
                   "64x256x64x4x3x2", "128x128x32x8x4x0"]


def parse_config(text: str) -> dict:
    """BMxBNxBKxWARPSxSTAGESxPERSM[xGROUP_M] (GROUP_M defaults to 8)."""
    parts = [int(part) for part in text.split("x")]
    block_m, block_n, block_k, warps, stages, per_sm = parts[:6]
    return dict(BLOCK_M=block_m, BLOCK_N=block_n, BLOCK_K=block_k, GROUP_M=parts[6] if len(parts) > 6 else 8,
                num_warps=warps, num_stages=stages, PROGRAMS_PER_SM=per_sm)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS,
                        help="BLOCK_M x BLOCK_N x BLOCK_K x warps x stages x programs per SM (0: one per tile) "
                             "[x GROUP_M, default 8]")
    parser.add_argument("--iters", type=int, default=30)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("mlp_kernel.py needs a CUDA GPU")
    tg = load_trainer(args.module, needed=("fused_mlp_op", "leaky_relu_sq_mlp", "MLP_UP_LAUNCH"))
    h = tg.Hyperparameters.from_env({})
    rows = h.train_batch_tokens // 8
    dim, hidden_dim = h.model_dim, int(h.mlp_mult * h.model_dim)
    device, dtype = torch.device("cuda"), torch.bfloat16
    generator = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(rows, dim, device=device, generator=generator).to(dtype).requires_grad_()
    w_up = (torch.randn(hidden_dim, dim, device=device, generator=generator) * dim ** -0.5).to(dtype)
    w_down = (torch.randn(dim, hidden_dim, device=device, generator=generator) * hidden_dim ** -0.5).to(dtype)
    w_up.requires_grad_(), w_down.requires_grad_()
    grad = torch.randn(rows, dim, device=device, generator=generator).to(dtype)
    inputs = (x, w_up, w_down)
    gemm_flop = 2.0 * rows * dim * hidden_dim
    print("shape rows=%d d=%d hidden=%d, bf16; one GEMM = %.3g FLOP" % (rows, dim, hidden_dim, gemm_flop))

    print("\n1. GEMMs alone: GPU ms per call (TFLOP/s)")
    print("%-20s %18s %18s" % ("config", "up + act (fwd)", "d_act + dh (bwd)"))
    plain = [tensor.detach() for tensor in inputs]
    cublas_up = timed_ms(lambda: torch.mm(plain[0], plain[1].t()), args.iters)
    cublas_down = timed_ms(lambda: torch.mm(grad, plain[2]), args.iters)
    print("%-20s %10.4f (%4.0f) %10.4f (%4.0f)" % ("cuBLAS bare GEMM", cublas_up, gemm_flop / cublas_up / 1e9,
                                                     cublas_down, gemm_flop / cublas_down / 1e9))
    # the shipped launch writing only act (as in inference): what storing h for the backward costs
    act_only = timed_ms(lambda: tg._mlp_forward(*plain, False), args.iters, "_mlp_up_act_fwd")
    print("%-20s %10.4f (%4.0f) %18s" % ("shipped, no h store", act_only, gemm_flop / act_only / 1e9, "-"))
    _, hidden, act = tg._mlp_forward(*plain, True)
    best = {}
    for text in args.configs:
        launch = parse_config(text)
        tg.MLP_UP_LAUNCH = tg.MLP_DOWN_LAUNCH = launch
        times = []
        for key, needle, fn in (
                ("up", "_mlp_up_act_fwd", lambda: tg._mlp_forward(*plain, True)),
                ("down", "_mlp_act_grad_bwd", lambda: tg._mlp_backward(grad, *plain, hidden, act, False, False,
                                                                       False))):
            try:
                ms = timed_ms(fn, args.iters, needle)
            except Exception as exc:  # e.g. out of shared memory for this tile: report and go on
                print("%-20s %s: %s" % (text, key, str(exc).splitlines()[0][:100]))
                ms = float("inf")
            times.append(ms)
            if ms < best.get(key, (float("inf"),))[0]:
                best[key] = (ms, launch, text)
        print("%-20s %10.4f (%4.0f) %10.4f (%4.0f)" % (text, times[0], gemm_flop / times[0] / 1e9, times[1],
                                                     gemm_flop / times[1] / 1e9), flush=True)
    print("fastest: up %s, down %s" % (best["up"][2], best["down"][2]))
    tg.MLP_UP_LAUNCH, tg.MLP_DOWN_LAUNCH = best["up"][1], best["down"][1]

    op = tg.fused_mlp_op()
    compiled = torch.compile(tg.leaky_relu_sq_mlp, dynamic=False)
    print("\n2. whole MLP, GPU ms per call")
    print("%-22s %9s %12s" % ("form", "fwd", "fwd+bwd"))
    for name, fn in (("compiled PyTorch", compiled), ("fused (fastest cfgs)", op)):
        def forward():
            with torch.no_grad():
                fn(*inputs)

        def forward_backward():
            torch.autograd.grad(fn(*inputs), inputs, grad)
        print("%-22s %9.4f %12.4f" % (name, timed_ms(forward, args.iters), timed_ms(forward_backward, args.iters)),
              flush=True)

    print("\n3. largest |form - fp32 reference| / largest |reference| (one bf16 rounding step is 3.9e-03)")
    reference_inputs = tuple(t.detach().float().requires_grad_() for t in inputs)
    reference = tg.leaky_relu_sq_mlp(*reference_inputs)
    wanted = (reference,) + torch.autograd.grad(reference, reference_inputs, grad.float())
    print("%-22s %9s %9s %9s %9s" % ("form", "out", "dx", "dw_up", "dw_down"))
    compiled_op = torch.compile(op, dynamic=False)  # the compiled graph must keep the kernels and their effects
    for name, fn in (("compiled PyTorch", compiled), ("fused", op), ("fused, compiled", compiled_op)):
        out = fn(*inputs)
        got = (out,) + torch.autograd.grad(out, inputs, grad)
        errors = [((a.float() - b).abs().max() / b.abs().max()).item() for a, b in zip(got, wanted)]
        print("%-22s %9.2e %9.2e %9.2e %9.2e" % ((name,) + tuple(errors)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
