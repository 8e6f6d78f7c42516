"""The fused q/k/v op of train_gpt.py (QK_KERNEL: from the one q/k/v projection to SDPA's inputs: q/k RMSNorm +
partial RoPE, q gain, value embedding, K and V repeated to all heads) against the compiled PyTorch form it
replaces (qkv_heads), at the record's micro-batch shape (48 x 2048 tokens, 8 query / 4 KV heads of 64): the largest
bf16 differences relative to the largest reference value (q, k, v, d_qkv, d_gain, d_value_embed) and the GPU time
per call, forward and forward+backward, for a sweep of launch configurations (rows per program x warps). The
upstream gradients have SDPA's (B, H, T, D) layout.

  python bench/qk_kernel.py                      # default sweep
  python bench/qk_kernel.py --configs 32x4 64x8  # rows x warps
"""
import argparse, sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, load_trainer  # noqa: E402


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
    tg = load_trainer(args.module, needed=("fused_qkv_heads_op", "qkv_heads", "QK_BLOCK_ROWS"))
    h = tg.Hyperparameters.from_env({})
    batch = h.train_batch_tokens // h.train_seq_len // 8
    seq_len, heads, kv_heads, head_dim = h.train_seq_len, h.num_heads, h.num_kv_heads, h.model_dim // h.num_heads
    repeat = heads // kv_heads
    device, dtype = torch.device("cuda"), torch.bfloat16
    rope = tg.rotary_tables(seq_len, head_dim, h.rope_dims, h.rope_base, device, dtype)
    op = tg.fused_qkv_heads_op()
    compiled_reference = torch.compile(
        lambda qkv, ve, gain: tg.qkv_heads(qkv, ve, *rope, gain, heads, h.rope_dims, repeat, False)[:3],
        dynamic=False)
    generator = torch.Generator(device=device).manual_seed(0)
    print("shape B=%d T=%d H=%d Hkv=%d D=%d rope_dims=%d, bf16, with a value embedding" % (
        batch, seq_len, heads, kv_heads, head_dim, h.rope_dims))
    names = ("q", "k", "v", "d_qkv", "d_gain", "d_ve")
    print(("%-8s" + " %8s" * len(names) + " %10s %12s") % (("impl",) + names + ("fwd_ms", "fwd+bwd_ms")))
    print("(errors: max |fused - torch| / max |torch|; one bf16 rounding step is 2^-8 = 3.9e-03 of a value)")

    def randn(*shape):
        return torch.randn(*shape, device=device, generator=generator).to(dtype)
    qkv = randn(batch, seq_len, (heads + 2 * kv_heads) * head_dim).requires_grad_()
    ve = randn(batch, seq_len, kv_heads * head_dim).requires_grad_()
    gain = (torch.rand(heads, device=device, generator=generator) + 1.0).to(dtype).requires_grad_()
    grads = [randn(batch, heads, seq_len, head_dim).transpose(1, 2) for _ in range(3)]
    inputs = (qkv, gain, ve)
    ref_out = compiled_reference(qkv, ve, gain)
    ref_grads = torch.autograd.grad(ref_out, inputs, grads)
    fused = lambda: op(qkv, ve, rope[0], rope[1], gain, heads, h.rope_dims, repeat, False)[:3]  # noqa: E731
    for label, run in (("torch", lambda: compiled_reference(qkv, ve, gain)), ("fused", fused)):
        for config in args.configs if label == "fused" else [None]:
            if config:
                tg.QK_BLOCK_ROWS, tg.QK_NUM_WARPS = (int(part) for part in config.split("x"))
            out = run()
            errors = [((a.float() - b.float()).abs().max() / b.float().abs().max()).item()
                      for a, b in zip(out + torch.autograd.grad(out, inputs, grads), ref_out + ref_grads)]

            def forward():
                with torch.no_grad():
                    run()
            print(("%-8s" + " %8.2e" * len(names) + " %10.4f %12.4f") % (
                (config or label,) + tuple(errors) + (timed_ms(forward, args.iters),
                                                      timed_ms(lambda: torch.autograd.grad(run(), inputs, grads),
                                                               args.iters))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
