"""The fused q/k RMSNorm + partial RoPE (+ q gain, + K's GQA repeat) op of train_gpt.py against the compiled
PyTorch form it replaces, at the record's micro-batch shape (48 x 2048 tokens, 8 query / 4 KV heads of 64): the
largest bf16 differences relative to the largest reference value (forward, dx, dgain) and the GPU time per call, forward and forward+backward, for a sweep of
launch configurations (rows per program x warps). The upstream gradient has SDPA's (B, H, T, D) layout.

  python bench/qk_kernel.py                      # default sweep
  python bench/qk_kernel.py --configs 32x4 64x8  # rows x warps
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_module import REPO, load_trainer  # noqa: E402


def timed_ms(fn, iters: int, needle: str = "") -> float:
    """GPU kernel time per call from the profiler (sum over the call's kernels whose name contains `needle`): the
    kernels here are ~0.1 ms, so wall time between events would measure the host's launch overhead instead."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
    return sum(event.device_time_total for event in prof.events()
               if event.device_type == torch.autograd.DeviceType.CUDA and needle in event.name) / 1000.0 / iters


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    parser.add_argument("--configs", nargs="+", default=["16x4", "32x4", "64x4", "32x8", "64x8", "128x8"])
    parser.add_argument("--iters", type=int, default=50)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("qk_kernel.py needs a CUDA GPU")
    tg = load_trainer(args.module, needed=("fused_qk_norm_rope_op", "qk_norm_rope", "QK_BLOCK_ROWS"))
    h = tg.Hyperparameters.from_env({})
    batch = h.train_batch_tokens // h.train_seq_len // 8
    seq_len, heads, kv_heads, head_dim = h.train_seq_len, h.num_heads, h.num_kv_heads, h.model_dim // h.num_heads
    device, dtype = torch.device("cuda"), torch.bfloat16
    rope = tg.rotary_tables(seq_len, head_dim, h.rope_dims, h.rope_base, device, dtype)
    op = tg.fused_qk_norm_rope_op()

    compiled_reference = torch.compile(lambda x, gain, repeat: tg.qk_norm_rope(x, *rope, gain, repeat), dynamic=False)
    generator = torch.Generator(device=device).manual_seed(0)
    print("shape B=%d T=%d H=%d Hkv=%d D=%d rope_dims=%d, bf16" % (batch, seq_len, heads, kv_heads, head_dim,
                                                                    h.rope_dims))
    print("%-6s %-8s %9s %9s %9s %10s %12s" % ("tensor", "impl", "fwd_err", "dx_err", "dgain_err", "fwd_ms",
                                               "fwd+bwd_ms"))
    print("(errors: max |fused - torch| / max |torch|; one bf16 rounding step is 2^-8 = 3.9e-03 of a value)")
    for name, in_heads, repeat, with_gain in (("q", heads, 1, True), ("k", kv_heads, heads // kv_heads, False)):
        x = torch.randn(batch, seq_len, in_heads * head_dim, device=device, generator=generator).to(dtype)
        x = x.view(batch, seq_len, in_heads, head_dim).requires_grad_()
        gain = (torch.rand(in_heads, device=device, generator=generator) + 1.0).to(dtype).requires_grad_() \
            if with_gain else None
        grad = torch.randn(batch, heads, seq_len, head_dim, device=device, generator=generator).to(dtype)
        grad = grad.transpose(1, 2)
        inputs = [x] + ([gain] if with_gain else [])
        ref_out = compiled_reference(x, gain, repeat)
        ref_grads = torch.autograd.grad(ref_out, inputs, grad)

        def torch_fwd():
            with torch.no_grad():
                compiled_reference(x, gain, repeat)

        def torch_fwd_bwd():
            torch.autograd.grad(compiled_reference(x, gain, repeat), inputs, grad)
        print("%-6s %-8s %9s %9s %9s %10.4f %12.4f" % (name, "torch", "-", "-", "-", timed_ms(torch_fwd, args.iters),
                                                       timed_ms(torch_fwd_bwd, args.iters)))
        for config in args.configs:
            tg.QK_BLOCK_ROWS, tg.QK_NUM_WARPS = (int(part) for part in config.split("x"))
            out = op(x, rope[0], rope[1], gain, h.rope_dims, repeat)
            grads = torch.autograd.grad(out, inputs, grad)
            errors = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                      for a, b in zip((out,) + grads, (ref_out,) + ref_grads)]

            def fused_fwd():
                with torch.no_grad():
                    op(x, rope[0], rope[1], gain, h.rope_dims, repeat)

            def fused_fwd_bwd():
                torch.autograd.grad(op(x, rope[0], rope[1], gain, h.rope_dims, repeat), inputs, grad)
            print("%-6s %-8s %9.2e %9.2e %9s %10.4f %12.4f" % (
                name, config, errors[0], errors[1], "%.2e" % errors[2] if with_gain else "-",
                timed_ms(fused_fwd, args.iters), timed_ms(fused_fwd_bwd, args.iters)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
