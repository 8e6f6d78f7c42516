"""Forward and forward+backward time of causal GQA attention at the training micro-batch shape, per SDPA
backend and input form, so the attention choice in train_gpt.py rests on numbers from the GPU at hand.

  python bench/attention_variants.py                        # record shape: B=48 T=2048 H=8 Hkv=4 D=64
  python bench/attention_variants.py --batch 8 --seq 4096

Forms: `repeat` expands K/V to all query heads with repeat_interleave (what train_gpt.py did first), `gqa`
passes the 4 KV heads with enable_gqa=True; `bthd` hands SDPA the (B,T,H,D) projections as transposed views,
`bhtd` makes them contiguous (B,H,T,D) first. Every variant's output is checked against the first one.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION,
            "efficient": SDPBackend.EFFICIENT_ATTENTION}


def attention(q, k, v, form: str, layout: str):
    q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if layout == "bhtd":
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    if form == "repeat":
        group = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True).transpose(1, 2)


def time_ms(fn, iters: int) -> float:
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / iters


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=48)
    parser.add_argument("--seq", type=int, default=2048)
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--kv-heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("attention_variants.py needs a CUDA GPU")
    torch.manual_seed(0)
    shape = (args.batch, args.seq)
    q = torch.randn(*shape, args.heads, args.head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn(*shape, args.kv_heads, args.head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    v = torch.randn(*shape, args.kv_heads, args.head_dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn(*shape, args.heads, args.head_dim, device="cuda", dtype=torch.bfloat16)
    causal_flops = 4 * args.batch * args.heads * args.seq * args.seq * args.head_dim / 2
    reference = None
    print("%-10s %-7s %-5s %10s %12s %10s %10s %s" % ("backend", "form", "layout", "fwd_ms", "fwd+bwd_ms",
                                                       "fwd_TF/s", "f+b_TF/s", "max|out-ref|"))
    for backend_name, backend in BACKENDS.items():
        for form in ("repeat", "gqa"):
            for layout in ("bthd", "bhtd"):
                try:
                    with sdpa_kernel([backend]):
                        out = attention(q, k, v, form, layout)

                        def forward():
                            with torch.no_grad():
                                attention(q, k, v, form, layout)

                        def forward_backward():
                            q.grad = k.grad = v.grad = None
                            attention(q, k, v, form, layout).backward(grad)

                        fwd, both = time_ms(forward, args.iters), time_ms(forward_backward, args.iters)
                except RuntimeError as exc:
                    print("%-10s %-7s %-5s unavailable: %s" % (backend_name, form, layout, str(exc).splitlines()[0][:90]))
                    continue
                reference = out.detach().float() if reference is None else reference
                diff = (out.detach().float() - reference).abs().max().item()
                print("%-10s %-7s %-5s %10.3f %12.3f %10.1f %10.1f %.2e" % (
                    backend_name, form, layout, fwd, both, causal_flops / fwd / 1e9, 3.5 * causal_flops / both / 1e9,
                    diff), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
