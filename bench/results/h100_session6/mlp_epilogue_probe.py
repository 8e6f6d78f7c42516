"""Experiment (bench/NOTES.md section 2, rejected): the MLP GEMMs of train_gpt.py at commit e004567 with their
epilogues storing through TMA descriptors (async bulk stores that could drain while the next tile's mainloop runs),
then with Triton's warp specialization (`tl.range(..., warp_specialize=True)`), against the shipped pointer-store
kernels and cuBLAS; eager, record shape, 1 GPU. Outputs: mlp_tma_store_REJECTED.txt (first part) and
mlp_warp_specialize_REJECTED.txt (second part; run then as a separate script with the same kernels).
Run from the repository root: python3 bench/results/h100_session6/mlp_epilogue_probe.py"""
import sys, itertools, torch, triton, triton.language as tl
sys.path.insert(0, "bench")
from trainer_module import load_trainer
tg = load_trainer()
_mlp_gemm = tg._mlp_gemm
triton.set_allocator(lambda size, align, stream: torch.empty(size, dtype=torch.int8, device="cuda"))
print("triton", triton.__version__, torch.cuda.get_device_name())


@triton.jit
def _origin(tile, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    tiles_n = tl.cdiv(N, BLOCK_N)
    group = tile // (GROUP_M * tiles_n)
    first_m = group * GROUP_M
    group_rows = min(tl.cdiv(M, BLOCK_M) - first_m, GROUP_M)
    pid_m = first_m + (tile % (GROUP_M * tiles_n)) % group_rows
    pid_n = (tile % (GROUP_M * tiles_n)) // group_rows
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@triton.jit
def _store_split(desc, om, on, value, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPLIT: tl.constexpr):
    if SPLIT == 1:
        desc.store([om, on], value)
    elif SPLIT == 2:
        a, b = tl.split(tl.permute(tl.reshape(value, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        desc.store([om, on], a)
        desc.store([om, on + BLOCK_N // 2], b)
    else:
        a, b = tl.split(tl.permute(tl.reshape(value, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
        a0, a1 = tl.split(tl.permute(tl.reshape(a, (BLOCK_M, 2, BLOCK_N // 4)), (0, 2, 1)))
        b0, b1 = tl.split(tl.permute(tl.reshape(b, (BLOCK_M, 2, BLOCK_N // 4)), (0, 2, 1)))
        desc.store([om, on], a0)
        desc.store([om, on + BLOCK_N // 4], a1)
        desc.store([om, on + BLOCK_N // 2], b0)
        desc.store([om, on + 3 * BLOCK_N // 4], b1)


@triton.jit
def fwd_tma(x_ptr, w_ptr, h_ptr, act_ptr, M, N, K, stride_xm, stride_wn, SLOPE: tl.constexpr,
            PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
            GROUP_M: tl.constexpr, SPLIT: tl.constexpr, TMA_LOADS: tl.constexpr):
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N // SPLIT])
    act_desc = tl.make_tensor_descriptor(act_ptr, shape=[M, N], strides=[N, 1],
                                         block_shape=[BLOCK_M, BLOCK_N // SPLIT])
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        om, on = _origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        if TMA_LOADS:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for k in range(0, K, BLOCK_K):
                acc = tl.dot(x_desc.load([om, k]), w_desc.load([on, k]).T, acc, input_precision=PRECISION)
        else:
            rm = om + tl.arange(0, BLOCK_M)
            rn = on + tl.arange(0, BLOCK_N)
            acc = _mlp_gemm(x_ptr, w_ptr, M, N, K, stride_xm, 1, stride_wn, rm, rn, BLOCK_M, BLOCK_N, BLOCK_K,
                            PRECISION)
        h = acc.to(act_ptr.dtype.element_ty)
        hf = h.to(tl.float32)
        leaky = tl.where(hf > 0, hf, hf * SLOPE)
        _store_split(h_desc, om, on, h, BLOCK_M, BLOCK_N, SPLIT)
        _store_split(act_desc, om, on, (leaky * leaky).to(act_ptr.dtype.element_ty), BLOCK_M, BLOCK_N, SPLIT)


@triton.jit
def bwd_tma(dy_ptr, w_ptr, h_ptr, dh_ptr, M, N, K, stride_dym, stride_wk, SLOPE: tl.constexpr,
            PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
            GROUP_M: tl.constexpr, SPLIT: tl.constexpr, H_TMA: tl.constexpr):
    dh_desc = tl.make_tensor_descriptor(dh_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N // SPLIT])
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N])
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=True):
        om, on = _origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        rm = om + tl.arange(0, BLOCK_M)
        rn = on + tl.arange(0, BLOCK_N)
        acc = _mlp_gemm(dy_ptr, w_ptr, M, N, K, stride_dym, stride_wk, 1, rm, rn, BLOCK_M, BLOCK_N, BLOCK_K,
                        PRECISION)
        d_act = acc.to(dh_ptr.dtype.element_ty).to(tl.float32)
        if H_TMA:
            h = h_desc.load([om, on]).to(tl.float32)
        else:
            ok = (rm < M)[:, None] & (rn < N)[None, :]
            h = tl.load(h_ptr + rm.to(tl.int64)[:, None] * N + rn[None, :], mask=ok, other=0.0).to(tl.float32)
        slope = tl.where(h > 0, 2.0 * h, (2.0 * SLOPE * SLOPE) * h)
        _store_split(dh_desc, om, on, (d_act * slope).to(dh_ptr.dtype.element_ty), BLOCK_M, BLOCK_N, SPLIT)


@triton.jit
def fwd_ws(x_ptr, w_ptr, h_ptr, act_ptr, M, N, K, stride_xm, stride_wn, SLOPE: tl.constexpr,
           PRECISION: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
           GROUP_M: tl.constexpr, SPLIT: tl.constexpr, OUTER_WS: tl.constexpr):
    h_desc = tl.make_tensor_descriptor(h_ptr, shape=[M, N], strides=[N, 1], block_shape=[BLOCK_M, BLOCK_N // SPLIT])
    act_desc = tl.make_tensor_descriptor(act_ptr, shape=[M, N], strides=[N, 1],
                                         block_shape=[BLOCK_M, BLOCK_N // SPLIT])
    x_desc = tl.make_tensor_descriptor(x_ptr, shape=[M, K], strides=[stride_xm, 1], block_shape=[BLOCK_M, BLOCK_K])
    w_desc = tl.make_tensor_descriptor(w_ptr, shape=[N, K], strides=[stride_wn, 1], block_shape=[BLOCK_N, BLOCK_K])
    tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    for tile in tl.range(tl.program_id(0), tiles, tl.num_programs(0), flatten=False, warp_specialize=OUTER_WS):
        om, on = _origin(tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for k in tl.range(0, K, BLOCK_K, warp_specialize=not OUTER_WS):
            acc = tl.dot(x_desc.load([om, k]), w_desc.load([on, k]).T, acc, input_precision=PRECISION)
        h = acc.to(act_ptr.dtype.element_ty)
        hf = h.to(tl.float32)
        leaky = tl.where(hf > 0, hf, hf * SLOPE)
        _store_split(h_desc, om, on, h, BLOCK_M, BLOCK_N, SPLIT)
        _store_split(act_desc, om, on, (leaky * leaky).to(act_ptr.dtype.element_ty), BLOCK_M, BLOCK_N, SPLIT)

def timed(fn, reps=40):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


M, D, F = 98304, 512, 1536
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(M, D, device="cuda", generator=g).bfloat16()
w_up = (torch.randn(F, D, device="cuda", generator=g) / D ** 0.5).bfloat16()
w_down = (torch.randn(D, F, device="cuda", generator=g) / F ** 0.5).bfloat16()
dy = torch.randn(M, D, device="cuda", generator=g).bfloat16()
sms = torch.cuda.get_device_properties(0).multi_processor_count

# shipped
h0, a0 = torch.empty(M, F, device="cuda", dtype=torch.bfloat16), torch.empty(M, F, device="cuda", dtype=torch.bfloat16)
grid, meta = tg._mlp_launch(tg.MLP_UP_LAUNCH, x, w_up, F)
ship_fwd = lambda: tg._mlp_up_act_fwd[grid](x, w_up, h0, a0, M, F, D, x.stride(0), w_up.stride(0), STORE_H=True, **meta)
dh0 = torch.empty(M, F, device="cuda", dtype=torch.bfloat16)
gridb, metab = tg._mlp_launch(tg.MLP_DOWN_LAUNCH, dy, w_down, F)
ship_bwd = lambda: tg._mlp_act_grad_bwd[gridb](dy, w_down, h0, dh0, M, F, D, dy.stride(0), w_down.stride(0), **metab)
print("cuBLAS x@w_up^T  %.4f ms" % timed(lambda: torch.mm(x, w_up.t())))
print("cuBLAS dy@w_down %.4f ms" % timed(lambda: torch.mm(dy, w_down)))
print("shipped fwd      %.4f ms" % timed(ship_fwd))
print("shipped bwd      %.4f ms" % timed(ship_bwd))
ship_fwd(); ship_bwd(); torch.cuda.synchronize()

h1, a1, dh1 = torch.empty_like(h0), torch.empty_like(a0), torch.empty_like(dh0)
for (bm, bn, bk, warps, stages, split, tma_loads, per_sm) in [
        (128, 256, 64, 8, 3, 2, 0, 1), (128, 256, 64, 8, 3, 4, 0, 1), (128, 256, 64, 8, 4, 4, 0, 1),
        (128, 256, 64, 8, 3, 2, 1, 1), (128, 256, 64, 8, 4, 4, 1, 1), (128, 256, 64, 8, 3, 1, 1, 1),
        (128, 128, 64, 4, 4, 1, 1, 2), (128, 128, 64, 8, 4, 2, 1, 2), (128, 128, 64, 4, 4, 2, 0, 2),
        (128, 256, 64, 8, 3, 4, 1, 1), (256, 128, 64, 8, 3, 2, 1, 1)]:
    tiles = triton.cdiv(M, bm) * triton.cdiv(F, bn)
    gr = (min(tiles, per_sm * sms),)
    kw = dict(SLOPE=0.5, PRECISION="tf32", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, SPLIT=split,
              num_warps=warps, num_stages=stages)
    label = "bm%d bn%d w%d s%d split%d per_sm%d" % (bm, bn, warps, stages, split, per_sm)
    try:
        f = lambda: fwd_tma[gr](x, w_up, h1, a1, M, F, D, x.stride(0), w_up.stride(0), TMA_LOADS=tma_loads, **kw)
        f(); torch.cuda.synchronize()
        same = torch.equal(h1, h0) and torch.equal(a1, a0)
        print("fwd tma_loads%d %-34s %.4f ms  equal:%s" % (tma_loads, label, timed(f), same), flush=True)
    except Exception as e:
        print("fwd tma_loads%d %-34s FAILED %s" % (tma_loads, label, str(e).splitlines()[0][:150]), flush=True)
    if tma_loads == 0 or bm == 256:
        continue
    for h_tma in (0, 1):
        try:
            f = lambda: bwd_tma[gr](dy, w_down, h0, dh1, M, F, D, dy.stride(0), w_down.stride(0), H_TMA=h_tma, **kw)
            f(); torch.cuda.synchronize()
            print("bwd h_tma%d     %-34s %.4f ms  equal:%s" % (h_tma, label, timed(f), torch.equal(dh1, dh0)), flush=True)
        except Exception as e:
            print("bwd h_tma%d     %-34s FAILED %s" % (h_tma, label, str(e).splitlines()[0][:150]), flush=True)

h1, a1 = torch.empty_like(h0), torch.empty_like(a0)
for (bm, bn, warps, stages, split, outer) in [(128, 256, 8, 3, 4, 1), (128, 256, 8, 3, 4, 0), (128, 128, 4, 4, 2, 1),
                                              (128, 128, 8, 4, 2, 1), (128, 256, 8, 2, 4, 1)]:
    tiles = triton.cdiv(M, bm) * triton.cdiv(F, bn)
    gr = (min(tiles, sms),)
    kw = dict(SLOPE=0.5, PRECISION="tf32", BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=64, GROUP_M=8, SPLIT=split,
              num_warps=warps, num_stages=stages)
    label = "bm%d bn%d w%d s%d split%d outer_ws%d" % (bm, bn, warps, stages, split, outer)
    try:
        f = lambda: fwd_ws[gr](x, w_up, h1, a1, M, F, D, x.stride(0), w_up.stride(0), OUTER_WS=outer, **kw)
        f(); torch.cuda.synchronize()
        same = torch.equal(h1, h0) and torch.equal(a1, a0)
        print("fwd ws %-40s %.4f ms  equal:%s" % (label, timed(f), same), flush=True)
    except Exception as e:
        print("fwd ws %-40s FAILED %s" % (label, " | ".join(str(e).splitlines())[:300]), flush=True)
