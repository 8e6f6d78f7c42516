"""What torch.compile believes train_gpt.py's Triton kernels write. Inductor reads each user kernel's TTIR and copies,
before the launch, every input that a store's address depends on and that is used again later (functional
semantics). A kernel that passes an input pointer into a helper whose results feed a store address is counted as
writing that input: the XSA backward once did (v through an index helper), and the compiled step then copied v
before each call (2.1 ms per step on 1xH100, bench/NOTES.md). This runs the same analysis on every launch of our
ops, on the CPU (TTIR needs a target, not a GPU), and requires the written set to be exactly the outputs."""
import inspect

import pytest
import torch

from tgpt_util import require_triton, tgpt  # noqa: F401  (fixture)

# kernel -> the pointer arguments it may write (its outputs)
WRITES = {
    "_qkv_heads_fwd": {"out_ptr", "plain_ptr"},
    "_qkv_heads_bwd": {"dx_ptr", "dadd_ptr", "dgain_ptr"},
    "_xsa_fwd": {"out_ptr"},
    "_xsa_bwd": {"dy_ptr", "dv_ptr"},
    "_mlp_up_act_fwd": {"h_ptr", "act_ptr"},
    "_mlp_act_grad_bwd": {"dh_ptr"},
    "_ce_fwd": {"loss_ptr", "lse_ptr"},
    "_ce_bwd": {"dx_ptr"},
}
LAUNCH_OPTIONS = ("num_warps", "num_stages")


def record_launches(tgpt, monkeypatch) -> list:
    """Every (kernel, bound arguments) our ops launch for one forward and backward on small CPU tensors, without
    running them (torch.library.wrap_triton is replaced by a recorder)."""
    launches = []

    class Recorder:
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                kwargs = {key: value for key, value in kwargs.items() if key not in LAUNCH_OPTIONS}
                launches.append((self.kernel, dict(zip(self.kernel.arg_names, args), **kwargs)))
            return launch
    monkeypatch.setattr(torch.library, "wrap_triton", Recorder)
    bf16 = dict(dtype=torch.bfloat16)
    # q/k/v op: 4 heads, 2 KV heads, head_dim 16, value embedding, K/V repeated twice
    qkv = torch.randn(2, 8, 8 * 16, **bf16)
    cos_full, sin_full, _ = tgpt.rotary_tables(8, 16, 8, 10000.0, "cpu", torch.bfloat16)
    gain, value_embed = torch.ones(4, **bf16), torch.randn(2, 8, 32, **bf16)
    q, k, v, v_plain = tgpt._qkv_heads_forward(qkv, value_embed, cos_full, sin_full, gain, 4, 8, 2, True)
    tgpt._qkv_heads_backward(q, k, v, v_plain, qkv, cos_full, sin_full, gain, 4, 8, 2, True, True)
    # XSA on SDPA's output layout (a (B, H, T, D) tensor seen as (B, T, H, D)), group 2
    y = torch.randn(2, 4, 8, 16, **bf16).transpose(1, 2)
    v = torch.randn(2, 8, 2, 16, **bf16)
    tgpt._xsa_forward(y, v)
    tgpt._xsa_backward(torch.randn_like(y), y, v)
    # MLP op at d = 64 (BLOCK_K divides it), hidden 192
    x, w_up, w_down = torch.randn(40, 64, **bf16), torch.randn(192, 64, **bf16), torch.randn(64, 192, **bf16)
    _, hidden, act = tgpt._mlp_forward(x, w_up, w_down, True)
    tgpt._mlp_backward(torch.randn(40, 64, **bf16), x, w_up, w_down, hidden, act, True, True, True)
    # softcapped CE: 6 rows of a 1500-token vocabulary (a partial last block)
    logits, targets = torch.randn(6, 1500, **bf16), torch.randint(1500, (6,))
    _, lse = tgpt._ce_forward(logits, targets, 30.0)
    tgpt._ce_backward(torch.randn(6), logits, targets, lse, 30.0)
    return launches


def test_compiled_graph_sees_only_outputs_written(tgpt, monkeypatch):
    require_triton()
    import triton
    from triton.backends.compiler import GPUTarget
    from torch._higher_order_ops.triton_kernel_wrap import identify_accessed_tensors

    launches = record_launches(tgpt, monkeypatch)
    assert sorted({kernel.fn.__name__ for kernel, _ in launches}) == sorted(WRITES)

    class Hopper:  # TTIR for an H100 without one
        def get_current_target(self):
            return GPUTarget("cuda", 90, 32)
    driver = triton.runtime.driver
    saved = driver._active  # reset_active() would build the default driver, which needs a GPU
    driver.set_active(Hopper())
    try:
        for kernel, arguments in launches:
            name = kernel.fn.__name__
            assert set(arguments) == set(inspect.signature(kernel.fn).parameters), name
            written = {dep.name for dep in identify_accessed_tensors(kernel, arguments, {}).read_writes.writes}
            # the analysis may leave out an output a launch does not store to (e.g. no value embedding)
            assert written and written <= WRITES[name], (name, sorted(written))
    finally:
        driver._active = saved
