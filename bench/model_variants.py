"""Forward+backward time of one training micro-step of the compiled model, for code variants of train_gpt.py's
model that keep the math (the step-time work of bench/NOTES.md): each variant patches functions of the loaded
module, compiles the model as `train` does and times micro-steps at the configured shape (record config by
default) on uniform random tokens or, with `--tokens shard`, on the first train shard's. The first loss of each
variant is printed next to the baseline's, and the norm of all first gradients (the first loss alone does not see
the MLPs, whose down-projections start at zero): same weights and tokens, so they may differ only by bf16 rounding.

  python bench/model_variants.py                       # all variants
  python bench/model_variants.py --variants base gqa   # some
  python bench/model_variants.py --variants base qk_torch --profile 25   # fused q/k/v op vs PyTorch form
  python bench/model_variants.py --variants base mlp_torch                # fused MLP kernel vs PyTorch form
  python bench/model_variants.py --module OLD_train_gpt.py --variants base   # another commit's trainer

Variants are cumulative by name: `gqa_qkv` = gqa + one fused QKV projection in PyTorch, and so on (see VARIANTS);
`qkv*` replace the attention forward, fused q/k/v op included, with their PyTorch form.

`floor_*` variants do NOT keep the math: each removes one component's work to measure what the rest costs, i.e. a
lower bound on the step time that any faster kernel for that component could reach (their first loss and gradient
norm differ from base by design):
  floor_mlp_gemms   the MLP as its two cuBLAS GEMMs without the activation (a free LeakyReLU^2, GEMMs at cuBLAS speed)
  floor_no_attn     attention returns q (no attention kernels at all)
  floor_no_norm     the block/embedding/final RMSNorms are the identity (the residual mixes and q/k norms stay)
  floor_all         all three
  floor_no_token_sums  the per-channel vectors and scalars whose gradients are sums over all tokens (resid_mix,
                    skip_weights, the smear gate, the bigram/value-embedding scales) get no gradient: what those
                    reductions cost inside the backward kernels

  python bench/model_variants.py --variants base floor_mlp_gemms floor_no_attn floor_no_norm floor_all
"""
import argparse
import os
import re
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from profile_step import family  # noqa: E402
from trainer_module import REPO, configure_kernels, load_trainer  # noqa: E402


def gqa_attention(tg):
    original = tg.causal_attention

    def causal_attention(q, k, v, backend):
        if backend == "fa3":
            return original(q, k, v, backend)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                              enable_gqa=q.size(1) != k.size(1)).transpose(1, 2)
    tg.causal_attention = causal_attention


def fused_qkv(tg, gain_before_rope: bool = False):
    def forward(self, x, w_q, w_k, w_v, w_o, rope, value_embed):
        batch, seq_len, _ = x.shape
        q_dim, kv_dim = w_q.size(0), w_k.size(0)
        qkv = F.linear(x, torch.cat((w_q, w_k, w_v)).to(x.dtype))
        q, k, v = qkv.split((q_dim, kv_dim, kv_dim), dim=-1)
        q = q.view(batch, seq_len, self.num_heads, self.head_dim)
        k = k.view(batch, seq_len, self.num_kv_heads, self.head_dim)
        if value_embed is not None:
            v = v + value_embed
        v = v.reshape(batch, seq_len, self.num_kv_heads, self.head_dim)
        if gain_before_rope:
            q = tg.apply_partial_rotary(tg.rms_norm(q) * self.q_gain.to(q.dtype)[None, None, :, None], *rope)
        else:
            q = tg.apply_partial_rotary(tg.rms_norm(q), *rope) * self.q_gain.to(q.dtype)[None, None, :, None]
        k = tg.apply_partial_rotary(tg.rms_norm(k), *rope)
        y = tg.causal_attention(q, k, v, self.backend)
        if self.use_xsa:
            group = self.num_heads // self.num_kv_heads
            y = y.view(batch, seq_len, self.num_kv_heads, group, self.head_dim)
            v_unit = F.normalize(v, dim=-1).unsqueeze(-2)
            y = y - (y * v_unit).sum(dim=-1, keepdim=True) * v_unit
        return F.linear(y.reshape(batch, seq_len, -1), w_o.to(x.dtype))
    tg.CausalSelfAttention.forward = forward


def force_torch(tg, env_name: str):
    """The start-up choice gives the PyTorch form for `env_name` (QK_KERNEL or MLP_KERNEL), whatever it probes."""
    select = tg.select_kernel
    tg.select_kernel = lambda name, *args: ("torch", "variant") if name == env_name else select(name, *args)


def qk_torch(tg):
    force_torch(tg, "QK_KERNEL")


def mlp_torch(tg):
    force_torch(tg, "MLP_KERNEL")


def floor_mlp_gemms(tg):
    mlp_torch(tg)
    tg.leaky_relu_sq_mlp = lambda x, w_up, w_down: F.linear(F.linear(x, w_up), w_down)


def floor_no_attn(tg):
    tg.causal_attention = lambda q, k, v, backend: q


def floor_no_norm(tg):
    rms_norm = tg.rms_norm  # q/k heads (4-D) keep their norm: the fused q/k/v op's start-up probe compares with it

    tg.rms_norm = lambda x: x if x.dim() == 3 else rms_norm(x)


def floor_no_token_sums(tg):
    build_model = tg.build_model

    def build_frozen(h, device):
        model = build_model(h, device)
        for name, param in model.named_parameters():
            if TOKEN_SUM_PARAMS.fullmatch(name):
                param.requires_grad_(False)
        return model
    tg.build_model = build_frozen


TOKEN_SUM_PARAMS = re.compile(r"skip_weights|smear\.gate|bigram\.scale|ve_shared\.scale|ve_layer_scales\.\d+|"
                              r"blocks\.\d+\.resid_mix")


def inductor_flag(name: str, value):
    """Sets an inductor config entry, dotted names for sub-configs (`triton.mix_order_reduction`); run_variant
    restores the whole config after the variant. Unknown names fail loudly (this torch may not have them)."""
    def patch(tg):
        import torch._inductor.config as inductor_config
        *path, leaf = name.split(".")
        target = inductor_config
        for part in path:
            target = getattr(target, part)
        if not hasattr(target, leaf):
            raise AttributeError("torch %s has no inductor config %s" % (torch.__version__, name))
        setattr(target, leaf, value)
    return patch


def compile_mode(mode: str):
    def patch(tg):
        tg.COMPILE_MODE = mode  # read by run_variant
    return patch


VARIANTS = {
    "base": [],
    "qk_torch": [qk_torch],
    "mlp_torch": [mlp_torch],
    "gqa": [qk_torch, gqa_attention],  # the fused q/k/v op repeats K and V itself, so GQA needs the PyTorch path
    "qkv": [fused_qkv],
    "gqa_qkv": [gqa_attention, fused_qkv],
    "gqa_qkv_gain": [gqa_attention, lambda tg: fused_qkv(tg, gain_before_rope=True)],
    "cdt": [inductor_flag("coordinate_descent_tuning", True)],
    "aggressive": [inductor_flag("aggressive_fusion", True)],
    "combo": [inductor_flag("combo_kernels", True)],
    "autotune_pointwise": [inductor_flag("max_autotune_pointwise", True)],
    "cudagraphs": [compile_mode("reduce-overhead")],
    "autotune": [compile_mode("max-autotune-no-cudagraphs")],
    "floor_mlp_gemms": [floor_mlp_gemms],
    "floor_no_attn": [floor_no_attn],
    "floor_no_norm": [floor_no_norm],
    "floor_all": [floor_mlp_gemms, floor_no_attn, floor_no_norm],
    "floor_no_token_sums": [floor_no_token_sums],
    "no_mix_order": [inductor_flag("triton.mix_order_reduction", False)],
    "mix_split_16": [inductor_flag("triton.mix_order_reduction_split_size", 16)],
    "mix_split_32": [inductor_flag("triton.mix_order_reduction_split_size", 32)],
    "mix_split_256": [inductor_flag("triton.mix_order_reduction_split_size", 256)],
    "mix_split_1024": [inductor_flag("triton.mix_order_reduction_split_size", 1024)],
}


def run_variant(name: str, args) -> tuple:
    tg = load_trainer(args.module)  # a fresh module per variant: patches never leak into the next one
    import torch._inductor.config as inductor_config
    saved_config = inductor_config.get_config_copy()
    for patch in VARIANTS[name]:
        patch(tg)
    h = tg.Hyperparameters.from_env(dict(os.environ))
    dist_info = tg.init_distributed({})
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    base = tg.build_model(h, dist_info.device)
    backend, _ = configure_kernels(tg, h, dist_info, base)
    model = torch.compile(base, dynamic=False, fullgraph=True, mode=getattr(tg, "COMPILE_MODE", None))
    rows = h.train_batch_tokens // h.train_seq_len // dist_info.grad_accum_steps
    if args.tokens == "shard":  # real text (measured: same time as random ids)
        shard = tg.load_data_shard(tg.list_shards(h.train_files, "train")[0])
        ids = torch.from_numpy(shard[:rows * (h.train_seq_len + 1)].astype("int64")).view(rows, -1)
        ids = ids.to(dist_info.device)
    else:
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, h.vocab_size, (rows, h.train_seq_len + 1), generator=generator).to(dist_info.device)
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()

    cudagraphs = getattr(tg, "COMPILE_MODE", None) in ("reduce-overhead", "max-autotune")
    if cudagraphs:  # grads exist before the first backward, so accumulation adds into them in place instead of
        for param in base.parameters():  # keeping the graph's output buffer, which the next replay overwrites
            param.grad = torch.zeros_like(param)

    def micro_step() -> torch.Tensor:
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()  # the previous replay's outputs may be overwritten now
        with tg.autocast_context(dist_info):
            loss = model(x, y)
        loss.backward()
        return loss.detach()

    start = time.perf_counter()
    first_loss = micro_step().item()
    # the first loss does not see the MLPs (their down-projections start at zero); the first gradients do
    first_grad_norm = torch.stack([p.grad.float().norm() for p in base.parameters() if p.grad is not None]).norm()
    first_grad_norm = first_grad_norm.item()
    for _ in range(2):
        micro_step()
    torch.cuda.synchronize()
    compile_s = time.perf_counter() - start
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(args.iters):
        micro_step()
    end.record()
    end.synchronize()
    micro_ms = begin.elapsed_time(end) / args.iters
    peak = torch.cuda.max_memory_allocated() / 2 ** 20
    if args.profile:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(2):
                micro_step()
            torch.cuda.synchronize()
        kernels = {}
        for event in prof.events():
            if event.device_type == torch.autograd.DeviceType.CUDA:
                kernels[event.name] = kernels.get(event.name, 0.0) + event.device_time_total / 2000.0
        families = {}
        for kernel, ms in kernels.items():
            families[family(kernel)] = families.get(family(kernel), 0.0) + ms
        print("  [%s] ms per micro-step by family: %s" % (name, "  ".join(
            "%s %.2f" % item for item in sorted(families.items(), key=lambda item: -item[1]))))
        for kernel, ms in sorted(kernels.items(), key=lambda item: -item[1])[:args.profile]:
            print("  [%s] %8.3f  %s" % (name, ms, kernel[:110]))
    del model, base
    torch._dynamo.reset()
    inductor_config.load_config(saved_config)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return micro_ms, micro_ms * dist_info.grad_accum_steps, first_loss, first_grad_norm, compile_s, peak, backend


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    parser.add_argument("--iters", type=int, default=16)
    parser.add_argument("--tokens", choices=("random", "shard"), default="random",
                        help="micro-batch tokens: uniform random ids, or the first train shard (DATA_PATH)")
    parser.add_argument("--profile", type=int, default=0, metavar="K",
                        help="also profile 2 micro-steps per variant: kernel families and the top K kernels")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("model_variants.py needs a CUDA GPU")
    print("%-16s %10s %14s %12s %14s %10s %10s %s" % ("variant", "micro_ms", "fwd+bwd_ms/step", "first_loss",
                                                       "first_gradnorm", "compile_s", "peak_MiB", "attention"))
    for name in args.variants:
        micro_ms, step_ms, loss, grad_norm, compile_s, peak, backend = run_variant(name, args)
        print("%-16s %10.2f %14.1f %12.6f %14.6f %10.1f %10.0f %s" % (name, micro_ms, step_ms, loss, grad_norm,
                                                                      compile_s, peak, backend), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
