"""How fast is a training step, per recipe and world size, at what fraction of the GPU's matmul rate, and where does
its GPU time go? Five modes:

flops    FLOPs of one optimizer step per config, before and after looping, and attention's share (CPU, seconds).
train    train_gpt.py (or any script with the challenge's log lines, e.g. an older commit's copy) for each script x
         config x world size, in one invocation so that before/after rows share the machine state; one table of
         step_avg, tokens/s, peak memory, data wait, the last val bpb, train losses at chosen steps, the step looping
         switched on, ms/step in windows of logged steps, the ratio to the first row, the kernels chosen; then per
         window (0: = step_avg) the FLOPs per step (pre-loop, looped or the mix) and MFU.
         Each run stops at its peak-memory line (the end of training: no end-of-run evals); --budget caps the call.
micro    forward+backward of one compiled micro-step (random tokens, or --tokens shard) per variant of the model
         code; the first loss and first-gradient norm show whether a variant kept the math.
profile  a few steps built from the trainer's functions (a recipe that loops: before, then after): step wall with
         and without a host sync per step, kernel time by family, the top kernels and, under torchrun, the NCCL
         time that overlapped compute.
attention  the recipe's attention kernels alone on its packed rows (DOC_ATTN_BACKENDs) and dense SDPA: ms, TFLOP/s,
         error against fp32 (one GPU; RECIPE, DATA_PATH from the environment).

  python3 bench/step_time.py train --steps 200 --loss-at 10 100 200 --script /tmp/old_train_gpt.py \\
      --script train_gpt.py --config record:             # before/after on 1 GPU (git show C:train_gpt.py > ...)
  python3 bench/step_time.py train --steps 200 --window 10:70 --window 80: --config 0427 --config 0409 \\
      --config 0427_dense --batch-tokens 786432          # the recipes side by side, before/after looping
  python3 bench/step_time.py train --config 0427 --nproc 1 4 --val-every 50   # world sizes, train vs val loss
  WARMUP_STEPS=5 python3 bench/step_time.py train --expect-same-losses --config p1_c1 --config p1_c1 \\
      --config p0_c0 --config p0_c1 --config p1_c0   # data wait per TRAIN_PREFETCH x TRAIN_COPY_STREAM, a control
  python3 bench/step_time.py micro --variants base qk_torch mlp_torch
  python3 bench/step_time.py micro --variants base inductor:aggressive_fusion=True mode:reduce-overhead
  python3 bench/step_time.py profile --steps 3 --trace $OUT/trace.json.gz
  RECIPE=2026-04-27 DATA_PATH=.carry/wiki_caseops python3 bench/step_time.py attention   # every backend

train: a config is LABEL:KEY=VALUE,... (nothing after the colon: the defaults) or a preset: 0323, 0409 (on --sp8192
data), 0427 (on --caseops data: documents loader, document-aware attention), 0427_dense (TRAIN_LOADER=shuffled:
dense causal attention), pP_cC (TRAIN_PREFETCH=P, TRAIN_COPY_STREAM=C). A config given twice gets a suffix: a
control run; --expect-same-losses exits 1 unless every run logs the first run's losses bit for bit. FLOPs: step_flops
(this train_gpt.py's model, also for an older --script). MFU: against --peak-tflops per GPU (H100/H200 SXM dense
bf16: 989) and the GPU's 8192^3 bf16 matmul rate, measured first. micro: a variant is a name of VARIANTS,
`inductor:NAME=VALUE` (a dotted inductor config entry) or `mode:MODE` (torch.compile's mode)."""
import argparse, ast, bisect, contextlib, glob, json, os, re, subprocess, sys, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, check_paths, configure_kernels, install_wheels, kill_leftover_trainers, load_trainer, \
    run_trainer, window_ms  # noqa: E402

# ==== FLOPs ====
COUNTER = {}  # the trainer module that step_flops counts with (loaded once) and its attention calls' q shapes
# the torch and GPU line, then (on a GPU) the bf16 matmul rate in TFLOP/s: 8192^3, the mean of 10 after 3 warm-ups
PROBE = ("import torch as T\nc = T.cuda\nprint('torch', T.__version__, c.device_count(), 'GPU(s)', c.is_available() "
         "and c.get_device_name(0))\na, b = T.randn(2, 8192, 8192, device='cuda', dtype=T.bfloat16)\ne = [c.Event("
         "enable_timing=True) for _ in range(2)]\nfor i in range(13):\n    e[0].record() if i == 3 else None\n"
         "    a @ b\ne[1].record()\ne[1].synchronize()\nprint(2 * 8192 ** 3 / e[0].elapsed_time(e[1]) / 1e8)")

def step_flops(env: dict, piece_tokens: float = 0.0) -> dict:
    """{looping: (FLOPs, of them attention's)} of one optimizer step of train_gpt.py's GPT at `env`'s settings, and
    "tokens", "piece", "piece_from": FlopCounterMode over forward + backward of a micro-step of TRAIN_BATCH_TOKENS/8
    tokens on the meta device, x 8, on the PyTorch paths (it cannot see the fused ops' GEMMs, the same ones). It takes
    causal SDPA as the whole T x T, so attention is counted here: a causal piece of L tokens has L^2/2 (query, key)
    pairs at 4 FLOPs per head dim forward (QK^T, PV) and 8 backward (dQ, dK, dV, dP; not the kernels' recompute of
    QK^T), so a call on N tokens is 6 N H D L_eff, L_eff = sum L^2 / sum L: TRAIN_SEQ_LEN on dense rows; on
    TRAIN_LOADER=documents rows piece_tokens if > 0, else measured on DATA_PATH, else TRAIN_SEQ_LEN (an upper bound)."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    if not COUNTER:  # attention replaced by a FLOP-free sum through which q, k and v still get their gradients
        tg = COUNTER["tg"] = load_trainer()
        tg.causal_attention = lambda q, k, v, *_: COUNTER["calls"].append(q.shape) or q + (k + v).repeat_interleave(
            q.size(2) // k.size(2), dim=2)
        tg.GPT._init_weights = lambda *_: None  # meta tensors hold no values
    tg = COUNTER["tg"]
    h = tg.Hyperparameters.from_env(dict(env, QK_KERNEL="torch", MLP_KERNEL="torch", CE_KERNEL="torch",
                                         COMPRESSOR="lzma"))  # the codec changes no FLOP; lzma needs no wheel
    row, documents, squares, rows = h.train_batch_tokens // 8, h.train_loader == "documents", 0.0, 0
    for path in sorted(glob.glob(h.train_files)) if documents and not piece_tokens else []:  # the loader's rows in
        shard = tg.load_data_shard(path)  # one pass of the shards (at most 1,024), each piece L of their cu_seqlens
        for begin in range(tg.first_document(path, shard, row + 1), len(shard) - row, row + 1)[:1024 - rows]:
            pieces = tg.np.diff(tg.document_cu_seqlens(shard[begin:begin + row], tg.BOS_ID, h.train_seq_len, 1))
            squares, rows = squares + float((pieces.astype("float64") ** 2).sum()), rows + 1
    piece, source = (piece_tokens, "assumed") if documents and piece_tokens else (squares / rows / row, "measured on "
                     + h.data_path) if rows else (h.train_seq_len, "no data: an upper bound" if documents else "dense")
    counts = {"tokens": h.train_batch_tokens, "piece": piece, "piece_from": source}
    with torch.device("meta"):
        model = tg.GPT(h)
        ids = torch.zeros((1, row) if documents else (row // h.train_seq_len, h.train_seq_len), dtype=torch.long)
        cu_seqlens = torch.zeros(2, dtype=torch.int32) if documents else None  # only whether there is one matters
    for looping in (False, True):
        model.looping, COUNTER["calls"] = looping, []
        with FlopCounterMode(display=False) as counter:
            model(ids, ids, cu_seqlens).backward()
        attention = sum(6 * b * t * heads * dim * piece for b, t, heads, dim in COUNTER["calls"])
        counts[looping] = (8 * (counter.get_total_flops() + attention), 8 * attention)
    return counts

def print_flops(lines: list, args) -> None:
    """Per (config, nproc, window, ms/step or None, counts, (FLOPs, attention) per step): MFU where ms is known."""
    mfu = lambda flops, ms, rate, gpus: "%.1f" % (flops / ms / rate / gpus / 1e7) if ms and rate else "-"  # noqa
    print("\nFLOPs per step (step_flops) and MFU per GPU against %.0f TFLOP/s (spec) and %.1f (this GPU's bf16 matmul; "
          "0: no GPU)\n%-11s %5s %9s %9s %11s %6s %8s %8s  %s" % (args.peak_tflops, args.matmul_tflops, "config",
          "nproc", "window", "ms/step", "FLOPs/step", "attn%", "MFU%spec", "MFU%mm", "attention's L_eff"))
    for label, nproc, window, ms, counts, (flops, attention) in lines:
        print("%-11s %5d %9s %9s %11.5g %6.2f %8s %8s  %.1f (%s)" % (
            label, nproc, window, "%.2f" % ms if ms else "-", flops, 100 * attention / flops,
            mfu(flops, ms, args.peak_tflops, nproc), mfu(flops, ms, args.matmul_tflops, nproc), counts["piece"],
            counts["piece_from"]))

# ==== train ====
def presets(args) -> dict:
    caseops = {"DATA_PATH": args.caseops, "TOKENIZER_PATH": args.caseops_tokenizer}
    data_path = {"p%d_c%d" % pc: {"TRAIN_PREFETCH": str(pc[0]), "TRAIN_COPY_STREAM": str(pc[1])}
                 for pc in ((0, 0), (0, 1), (1, 0), (1, 1))}
    return {"0323": {"RECIPE": "2026-03-23"},
            "0409": {"RECIPE": "2026-04-09", "DATA_PATH": args.sp8192, "TOKENIZER_PATH": args.sp8192_tokenizer},
            "0427": dict(caseops, RECIPE="2026-04-27"),
            "0427_dense": dict(caseops, RECIPE="2026-04-27", TRAIN_LOADER="shuffled"), **data_path}

def parse_config(text: str, known: dict) -> tuple:
    if ":" not in text:
        if text not in known:
            sys.exit(f"--config {text!r}: neither LABEL:KEY=VALUE,... nor a preset ({', '.join(known)})")
        return text, known[text]
    label, _, settings = text.partition(":")
    return label or "default", dict(item.split("=", 1) for item in settings.split(",") if item.strip())

def train(args) -> int:
    configs, labels = [parse_config(text, presets(args)) for text in (args.config or ["record:"])], []
    for index, (label, settings) in enumerate(configs):  # a config given twice (a control run) gets a suffix
        labels.append(label if label not in labels else "%s_%d" % (label, index))
        configs[index] = (labels[-1], settings)
    batch = {"TRAIN_BATCH_TOKENS": str(args.batch_tokens)} if args.batch_tokens else {}
    if args.mode == "flops":  # the counts alone, on any machine
        print_flops([(label, 1, ("pre-loop", "looped")[looping], None, counts, counts[looping]) for label, settings
                     in configs for counts in [step_flops(dict(settings, **batch), args.piece_tokens)]
                     for looping in (False, True)], args)
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if os.environ.get("LEFTOVERS_KILLED") != "1":  # harness.py gpus did it once for all its commands
        kill_leftover_trainers()
    install_wheels(required=False)  # COMPRESSOR=pergroup recipes check for constriction at start-up
    probe = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True).stdout.splitlines()
    print(*probe[:1])  # in a child, before the runs: the GPU idle, and this process holds no CUDA context beside them
    args.matmul_tflops = args.matmul_tflops or (float(probe[1]) if len(probe) > 1 else 0.0)  # 0: no GPU
    for settings in (settings for _, settings in configs if "DATA_PATH" in settings):
        check_paths("step_time", settings["DATA_PATH"], settings["TOKENIZER_PATH"])
    base = dict(os.environ, ITERATIONS=str(args.steps), MAX_WALLCLOCK_SECONDS="0", WARMDOWN_ITERS="0",
                LATE_QAT_THRESHOLD="0", VAL_LOSS_EVERY=str(args.val_every), TRAIN_LOG_EVERY="10", PYTHONUNBUFFERED="1",
                **batch)
    runs = [(script, label, settings, nproc) for script in args.script or [REPO / "train_gpt.py"]
            for label, settings in configs for nproc in args.nproc]
    rows, end = [], time.monotonic() + (args.budget if args.budget > 0 else float("inf"))
    for index, (script, label, settings, nproc) in enumerate(runs):
        env = dict(base, **settings)
        name = "%s__%s__%d" % (script.stem, label, nproc)
        share = (end - time.monotonic()) / (len(runs) - index)  # an equal share of what is left of the budget
        timeout = max(1.0, min(args.timeout, share))
        print("== %s: nproc %d, at most %.0f s" % (name, nproc, timeout), flush=True)
        result = run_trainer([script.resolve()], env, nproc, args.out_dir / (name + ".log"), timeout, stop_at_peak=True)
        if result["step_avg"] is None:
            print("%s: %s; see %s" % (name, (result["errors"] or ["no step lines (time limit, or failed)"])[-1],
                                      args.out_dir / (name + ".log")), flush=True)
        rows.append((str(script), label, nproc, env, result))
    print_train_table(args, rows)
    differ = [label for _, label, _, _, result in rows if result["loss"] != rows[0][4]["loss"]]
    if args.expect_same_losses and differ:
        print("\nlosses differ from the first run's: %s (what was trained on, or the math, changed)" % differ)
    failed = any(result["step_avg"] is None for *_, result in rows)
    return 1 if failed or (args.expect_same_losses and differ) else 0

def print_train_table(args, rows) -> None:
    def reference_ms(result):  # the first window if any (e.g. before looping), else step_avg
        value = window_ms(result["train_ms"], args.window[0]) if args.window else result["step_avg"]
        return None if value in (None, "n/a") else float(value)

    def window_flops(counts: dict, window: str, steps: int, loop_step) -> tuple:  # mean (FLOPs, attention)/step
        first, last = (int(part or steps) for part in window.split(":"))  # of logged steps first+1..last, those
        looped = 0 if loop_step is None else max(0, last - max(first, loop_step))  # after loop_step looped
        return tuple((a * (last - first - looped) + b * looped) / max(last - first, 1)
                     for a, b in zip(counts[False], counts[True]))
    first = reference_ms(rows[0][4]) if rows else None
    print("\nsteps=%d; logs in %s\n%-24s %-11s %5s %11s %10s %8s %9s %13s %s %5s %5s%s %6s  %s" % (
        args.steps, args.out_dir, "script", "config", "nproc", "step_avg_ms", "tokens/s", "peak_MiB", "wait_ms",
        "val_bpb@step", "loss@" + "/".join(map(str, args.loss_at)), "steps", "loop@",
        "".join(" %10s" % ("ms/step" + window) for window in args.window), "x_1st", "kernels"))
    windows = []
    for script, label, nproc, env, result in rows:
        if result["step_avg"] is None:
            print("%-24s %-11s %5d failed" % (script[-24:], label, nproc))
            continue
        counts = step_flops(env, args.piece_tokens)
        windows += [(label, nproc, window, float(ms), counts, window_flops(counts, window, result["steps"],
                                                                           result["loop_step"])) for window, ms in
                    [("0:", result["step_avg"])] + [(w, window_ms(result["train_ms"], w)) for w in args.window]
                    if ms != "n/a"]
        last_val = max(result["val"], default=None)
        val = "%s@%d" % (result["val"][last_val][1], last_val) if last_val else "n/a"
        ratio = reference_ms(result)
        print("%-24s %-11s %5d %11.2f %10.0f %8s %9s %13s %s %5d %5s%s %6s  %s" % (
            script[-24:], label, nproc, result["step_avg"], counts["tokens"] / (result["step_avg"] / 1000.0),
            result["peak_mib"], "n/a" if result["wait_ms"] is None else "%.3f" % result["wait_ms"], val,
            "/".join(str(result["loss"].get(s, "-")) for s in args.loss_at), result["steps"],
            result["loop_step"] or "-", "".join(" %10s" % window_ms(result["train_ms"], w) for w in args.window),
            "%.3f" % (ratio / first) if ratio and first else "n/a",
            " ".join("%s=%s" % item for item in result["kernels"].items())))
    print_flops(windows, args)
    for script, label, nproc, _, result in rows:
        if len(result["val"]) > 1:
            print("%s %s nproc %d, step: train_loss/val_loss: %s" % (script[-24:], label, nproc, " ".join(
                "%d:%s/%s" % (s, result["loss"].get(s, "-"), v[0]) for s, v in sorted(result["val"].items()))))

# ==== micro ====
def force_torch(tg, env_name: str):
    """The start-up choice gives the PyTorch form for `env_name` (QK_KERNEL or MLP_KERNEL), whatever it probes."""
    select = tg.select_kernel
    tg.select_kernel = lambda name, *args: ("torch", "variant") if name == env_name else select(name, *args)

VARIANTS = {
    "base": [],
    "qk_torch": [lambda tg: force_torch(tg, "QK_KERNEL")],  # the fused q/k/v op vs its PyTorch form
    "mlp_torch": [lambda tg: force_torch(tg, "MLP_KERNEL")],  # the fused MLP kernel vs its PyTorch form
}

def variant_patches(name: str) -> list:
    if name in VARIANTS:
        return VARIANTS[name]
    kind, _, setting = name.partition(":")
    if kind == "mode" and setting:
        return [lambda tg: setattr(tg, "COMPILE_MODE", setting)]  # read by run_variant
    if kind == "inductor" and "=" in setting:
        key, _, value = setting.partition("=")

        def patch(tg):  # run_variant restores the whole config afterwards; unknown names fail loudly
            import torch._inductor.config as inductor_config
            *path, leaf = key.split(".")
            target = inductor_config
            for part in path:
                target = getattr(target, part)
            if not hasattr(target, leaf):
                raise AttributeError("this torch has no inductor config %s" % key)
            setattr(target, leaf, ast.literal_eval(value))
        return [patch]
    sys.exit(f"--variants: {name!r} is none of {', '.join(VARIANTS)}, inductor:NAME=VALUE, mode:MODE")

def run_variant(name: str, args) -> tuple:
    import torch
    import torch._inductor.config as inductor_config
    tg = load_trainer(args.module)  # a fresh module per variant: patches never leak into the next one
    saved_config = inductor_config.get_config_copy()
    for patch in variant_patches(name):
        patch(tg)
    h = tg.Hyperparameters.from_env(dict(os.environ))
    dist_info = tg.init_distributed({})
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    base = tg.build_model(h, dist_info.device)
    backend, _ = configure_kernels(tg, h, dist_info, base)
    mode = getattr(tg, "COMPILE_MODE", None)
    model = torch.compile(base, dynamic=False, fullgraph=True, mode=mode)
    rows = h.train_batch_tokens // h.train_seq_len // dist_info.grad_accum_steps
    if args.tokens == "shard":  # real text (measured: the same time as random ids)
        shard = tg.load_data_shard(tg.list_shards(h.train_files, "train")[0])
        ids = torch.from_numpy(shard[:rows * (h.train_seq_len + 1)].astype("int64")).view(rows, -1)
    else:
        generator = torch.Generator().manual_seed(0)
        ids = torch.randint(0, h.vocab_size, (rows, h.train_seq_len + 1), generator=generator)
    ids = ids.to(dist_info.device)
    x, y = ids[:, :-1].contiguous(), ids[:, 1:].contiguous()
    cudagraphs = mode in ("reduce-overhead", "max-autotune")
    if cudagraphs:  # grads exist before the first backward, so accumulation adds into them in place instead of
        for param in base.parameters():  # keeping the graph's output buffer, which the next replay overwrites
            param.grad = torch.zeros_like(param)

    def micro_step():
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        with tg.autocast_context(dist_info):
            loss = model(x, y)
        loss.backward()
        return loss.detach()

    start = time.perf_counter()
    first_loss = micro_step().item()
    grad_norm = torch.stack([p.grad.float().norm() for p in base.parameters() if p.grad is not None]).norm().item()
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
        kernels = kernel_times(prof, cuda=True)
        print_families(kernels, 2, args.profile, prefix="  [%s] " % name)  # ms per micro-step
    del model, base
    torch._dynamo.reset()
    inductor_config.load_config(saved_config)
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    return micro_ms, micro_ms * dist_info.grad_accum_steps, first_loss, grad_norm, compile_s, peak, backend

def micro(args) -> int:
    import torch
    if not torch.cuda.is_available():
        sys.exit("step_time.py micro needs a CUDA GPU")
    print("%-28s %10s %15s %12s %14s %10s %10s %s" % ("variant", "micro_ms", "fwd+bwd_ms/step", "first_loss",
                                                      "first_gradnorm", "compile_s", "peak_MiB", "attention"))
    for name in args.variants:
        micro_ms, step_ms, loss, grad_norm, compile_s, peak, backend = run_variant(name, args)
        print("%-28s %10.2f %15.1f %12.6f %14.6f %10.1f %10.0f %s" % (name[:28], micro_ms, step_ms, loss, grad_norm,
                                                                      compile_s, peak, backend), flush=True)
    return 0

# ==== attention ====
def attention(args) -> int:
    """Forward and forward+backward ms of the recipe's attention on the loader's packed rows of DATA_PATH (the
    micro-step's TRAIN_BATCH_TOKENS/8 tokens, pieces <= TRAIN_SEQ_LEN) per DOC_ATTN_BACKEND, and of dense causal SDPA
    per kernel on rows of TRAIN_SEQ_LEN; TFLOP/s at 6 H D sum(L^2) FLOPs (as `flops`); error of out and gradients
    against per_document_attention in fp32 on the first row (dense: a causal piece of the first row)."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel
    tg = load_trainer()
    h = tg.Hyperparameters.from_env(dict(os.environ))
    row, seq, device = h.train_batch_tokens // 8, h.train_seq_len, torch.device("cuda")
    heads, kv_heads, dim = h.num_heads, h.num_kv_heads, h.model_dim // h.num_heads
    shard = tg.load_data_shard(tg.list_shards(h.train_files, "train")[0])
    begin = tg.first_document("train", shard, row + 1)
    cus = [torch.from_numpy(tg.document_cu_seqlens(shard[b:b + row], tg.BOS_ID, h.train_seq_len,
                                                   tg.CU_SEQLENS_BUCKET)).to(device)
           for b in range(begin, len(shard) - row, row + 1)[:args.rows]]
    squares = sum(float((torch.diff(cu).double() ** 2).sum()) for cu in cus) / len(cus)
    gen = torch.Generator(device=device).manual_seed(0)
    qkv = [torch.randn((1, row, n, dim), device=device, dtype=torch.bfloat16, generator=gen).requires_grad_()
           for n in (heads, kv_heads, kv_heads)]
    grad = torch.randn((1, row, heads, dim), device=device, dtype=torch.bfloat16, generator=gen)
    dense = [t.detach().view(row // seq, seq, *t.shape[2:]).requires_grad_() for t in qkv]
    cu_dense = torch.arange(0, row + 1, seq, device=device, dtype=torch.int32)

    def errors(run, cu):  # max |diff| / max |reference| of out, dq, dk, dv against fp32 per-document SDPA
        tensors = [t.detach()[:, :int(cu[-1])].clone().requires_grad_() for t in qkv]
        results = []
        for fn, dtype in ((run, torch.bfloat16), (lambda q, k, v: tg.per_document_attention(q, k, v, cu),
                                                  torch.float32)):
            inputs = [t.detach().to(dtype).requires_grad_() for t in tensors]
            with sdpa_kernel(SDPBackend.MATH) if dtype == torch.float32 else contextlib.nullcontext():
                out = fn(*inputs)
            out.backward(grad[:, :out.size(1)].to(dtype))
            results.append([out.detach().float()] + [t.grad.float() for t in inputs])
        return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(*results))

    def timed(fn, backward):
        for index in range(args.iters + 3):
            if index == 3:
                torch.cuda.synchronize()
                start = time.perf_counter()
            out = fn()
            if backward:
                out.backward(grad.view(out.shape))
        torch.cuda.synchronize()
        return 1000.0 * (time.perf_counter() - start) / args.iters

    print("rows %d x %d tokens, %d pieces per row, L_eff %.1f; dense rows %d x %d" % (
        len(cus), row, sum(int((torch.diff(cu) > 0).sum()) for cu in cus) // len(cus), squares / row, row // seq, seq))
    print("%-24s %10s %12s %10s %10s  %s" % ("backend", "fwd_ms", "fwd+bwd_ms", "TFLOP/s", "max_err", "note"))
    cases = [(name, None) for name in args.backends] + [("dense_" + name, name) for name in args.dense]
    for name, sdpa in cases:
        try:
            if sdpa is None:
                fns = [lambda cu=cu: tg.document_attention(*qkv, cu, seq, name) for cu in cus]
                err = errors(lambda q, k, v: tg.document_attention(q, k, v, cus[0], seq, name), cus[0])
                flops = 6 * heads * dim * squares
            else:
                fns = [lambda: tg.causal_attention(*dense, "sdpa")]
                with sdpa_kernel(getattr(SDPBackend, sdpa.upper())):
                    err = errors(lambda q, k, v: tg.causal_attention(q, k, v, "sdpa"), cu_dense[:2])
                flops = 6 * heads * dim * seq * row
            with sdpa_kernel(getattr(SDPBackend, sdpa.upper())) if sdpa else contextlib.nullcontext():
                fwd = sum(timed(fn, False) for fn in fns) / len(fns)
                both = sum(timed(fn, True) for fn in fns) / len(fns)
            print("%-24s %10.3f %12.3f %10.1f %10.2e" % (name, fwd, both, flops / both / 1e9, err), flush=True)
        except Exception as exc:  # a backend missing here is a row that says why, not the end of the table
            print("%-24s %10s %12s %10s %10s  %s" % (name, "-", "-", "-", "-", str(exc).splitlines()[0][:120]))
    return 0

# ==== profile ====
FAMILIES = (  # first match wins; matched against the lower-cased kernel name
    ("nccl", ("nccl",)),
    ("attention", ("fmha", "flash", "attention", "sdpa", "cudnn")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "sm90_", "matmul")),
    ("triton", ("triton",)),
    ("qkv kernel", ("_qkv_heads", "_qk_norm_rope")),  # train_gpt.py's own Triton kernels (QK_KERNEL=triton)
    ("xsa kernel", ("_xsa_fwd", "_xsa_bwd")),  # (QK_KERNEL=triton too)
    ("mlp kernel", ("_mlp_up_act_fwd", "_mlp_act_grad_bwd")),  # and its GEMMs with the activation (MLP_KERNEL)
    ("copy/memset", ("memcpy", "memset", "copy")),
)

def family(name: str) -> str:
    lowered = name.lower()
    return next((label for label, needles in FAMILIES if any(needle in lowered for needle in needles)), "other")

def overlap_report(device_events, steps: int) -> str:
    """Per NCCL kernel kind: time per step and the part of it during which a non-NCCL kernel also ran (hidden)."""
    merged = []
    for start, end in sorted((e.time_range.start, e.time_range.end) for e in device_events
                             if "nccl" not in e.name.lower()):
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = [interval[0] for interval in merged]
    kinds = {}
    for event in device_events:
        if "nccl" not in event.name.lower():
            continue
        start, end = event.time_range.start, event.time_range.end
        index, hidden = max(bisect.bisect_left(starts, start) - 1, 0), 0.0
        while index < len(merged) and merged[index][0] < end:
            hidden += max(0.0, min(end, merged[index][1]) - max(start, merged[index][0]))
            index += 1
        entry = kinds.setdefault(event.name.split("(")[0], [0, 0.0, 0.0])
        entry[0], entry[1], entry[2] = entry[0] + 1, entry[1] + end - start, entry[2] + hidden
    if not kinds:
        return "no NCCL kernels in the profile (one process, or not on CUDA)"
    total, hidden = sum(v[1] for v in kinds.values()), sum(v[2] for v in kinds.values())
    lines = ["NCCL kernel time %.3f ms/step, of which %.3f ms (%.1f%%) overlapped compute kernels" % (
        total / 1000.0 / steps, hidden / 1000.0 / steps, 100.0 * hidden / total)]
    for name, (calls, duration, covered) in sorted(kinds.items(), key=lambda item: -item[1][1]):
        lines.append("  %-60s calls/step %5.1f  ms/step %7.3f  hidden %5.1f%%" % (
            name[:60], calls / steps, duration / 1000.0 / steps, 100.0 * covered / duration))
    return "\n".join(lines)

def kernel_times(prof, cuda: bool) -> dict:
    """{kernel name: [calls, ms]} of a profile (on the CPU: the top-level aten ops' CPU time)."""
    import torch
    kernels = {}
    for event in prof.events():
        if cuda and event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        if cuda and (getattr(event, "is_user_annotation", False) or event.name.startswith("nccl:")):
            continue  # GPU-side annotations ("nccl:all_reduce" ranges) are not kernels: they double NCCL time
        if not cuda and not (event.name.startswith("aten::") and event.cpu_parent is None):
            continue
        entry = kernels.setdefault(event.name, [0, 0.0])
        entry[0] += 1
        entry[1] += (event.device_time_total if cuda else event.cpu_time_total) / 1000.0  # us -> ms
    return kernels

def print_families(kernels: dict, steps: float, top: int, prefix: str = "") -> dict:
    total = sum(ms for _, ms in kernels.values()) or 1.0
    by_family = {}
    for name, (_, ms) in kernels.items():
        by_family[family(name)] = by_family.get(family(name), 0.0) + ms
    print("\n%s%-12s %12s %8s" % (prefix, "family", "ms/step", "share"))
    for label, ms in sorted(by_family.items(), key=lambda item: -item[1]):
        print("%s%-12s %12.2f %7.1f%%" % (prefix, label, ms / steps, 100.0 * ms / total))
    print("\n%s%-100s %7s %10s %7s" % (prefix, "kernel", "calls/st", "ms/step", "share"))
    for name, (calls, ms) in sorted(kernels.items(), key=lambda item: -item[1][1])[:top]:
        print("%s%-100s %7.0f %10.2f %6.1f%%" % (prefix, name[:100], calls / steps, ms / steps, 100.0 * ms / total))
    return by_family

def profile(args) -> int:
    import torch
    from torch.profiler import ProfilerActivity
    tg = load_trainer(args.module)
    environ = dict(os.environ)
    h = tg.Hyperparameters.from_env(environ)
    dist_info = tg.init_distributed(environ)  # under torchrun: one process per GPU, NCCL
    h.validate_for_world(dist_info.world_size)
    if not dist_info.is_main:
        sys.stdout = open(os.devnull, "w")  # rank 0 reports
    logger = tg.Logger(dist_info, "/tmp/profile_step_logs", h.run_id)  # a fresh uuid unless RUN_ID is set
    cuda = dist_info.is_cuda
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    base_model = tg.build_model(h, dist_info.device)
    _, attention = configure_kernels(tg, h, dist_info, base_model)
    compiled = tg.compile_enabled(h, dist_info)
    model = torch.compile(base_model, dynamic=False, fullgraph=True) if compiled else base_model
    optimizers = tg.Optimizers(h, base_model, dist_info)
    averages = tg.WeightAverages(h, base_model)
    loader = tg.make_train_loader(h, dist_info, logger)
    print("attention_backend:%s compiled:%s grad_accum:%d tokens/step:%d" % (
        attention, compiled, dist_info.grad_accum_steps, h.train_batch_tokens), flush=True)

    def step(sync: bool) -> None:
        optimizers.zero_grad()
        tg.run_micro_steps(dist_info, model, loader)
        optimizers.set_schedule(1.0, h.muon_momentum)
        if h.grad_clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(base_model.parameters(), h.grad_clip_norm)
        optimizers.step()
        optimizers.zero_grad()
        averages.update_ema()
        if sync:
            tg.sync_device(dist_info)

    report = {}
    for looping in (False, True)[:1 + (h.num_loops > 0)]:  # a recipe that loops: its step before and after
        base_model.looping = looping
        print("\n==== looping:%s" % looping, flush=True)
        start = time.perf_counter()
        for _ in range(args.warmup):
            step(sync=True)
        print("warmup (compile included): %.1f s" % (time.perf_counter() - start), flush=True)
        timings = {}
        for sync in (True, False, True, False):  # the training loop's wallclock check syncs the host every step
            tg.sync_device(dist_info)
            start = time.perf_counter()
            for _ in range(args.steps):
                step(sync)
            tg.sync_device(dist_info)
            timings.setdefault(sync, []).append(1000.0 * (time.perf_counter() - start) / args.steps)
        for sync, values in timings.items():
            print("step wall, host sync after each step=%s: %s ms" % (sync, " ".join("%.2f" % v for v in values)))
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with torch.profiler.profile(activities=activities) as prof:
            tg.sync_device(dist_info)
            start = time.perf_counter()
            for _ in range(args.steps):
                step(sync=True)
            tg.sync_device(dist_info)
            wall_ms = 1000.0 * (time.perf_counter() - start) / args.steps
        kernels = kernel_times(prof, cuda)
        total = sum(ms for _, ms in kernels.values())
        print("\nprofiled %d steps: wall %.2f ms/step (profiler on), kernel time %.2f ms/step (%.1f%% of wall)"
              % (args.steps, wall_ms, total / args.steps, 100.0 * total / args.steps / wall_ms))
        device_events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                         and not getattr(e, "is_user_annotation", False) and not e.name.startswith("nccl:")]
        print(overlap_report(device_events, args.steps))
        by_family = print_families(kernels, args.steps, args.top)
        if args.trace is not None and dist_info.is_main:
            trace = args.trace.with_name(("looped_" if looping else "") + args.trace.name)
            trace.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(trace))  # gzipped when the name ends in .gz
            print("trace: %s" % trace)
        report["looped" if looping else "pre-loop"] = {
            "wall_ms": wall_ms, "timings": {str(k): v for k, v in timings.items()},
            "families_ms_per_step": {k: v / args.steps for k, v in by_family.items()}}
    print(json.dumps(report))
    loader.close()
    logger.close()
    if dist_info.distributed:
        torch.distributed.destroy_process_group()
    return 0

def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    modes = parser.add_subparsers(dest="mode", required=True)
    run = modes.add_parser("train", aliases=["flops"], help="train_gpt.py runs side by side: one table (flops: "
                           "only each config's FLOPs per step, no run, on any machine)")
    run.add_argument("--script", action="append", type=Path, help="training script(s) (default train_gpt.py)")
    run.add_argument("--config", action="append", help="LABEL:KEY=VAL,... or a preset (default 'record:')")
    run.add_argument("--nproc", type=int, nargs="+", default=[1], help="world sizes, one run each")
    run.add_argument("--steps", type=int, default=120)
    run.add_argument("--batch-tokens", type=int, default=0, help="TRAIN_BATCH_TOKENS for every run (0: as set)")
    run.add_argument("--piece-tokens", type=float, default=0.0, help="TRAIN_LOADER=documents: attention's L_eff = "
                     "sum L^2 / sum L over its pieces L (0: measured on DATA_PATH; no data: TRAIN_SEQ_LEN)")
    run.add_argument("--val-every", type=int, default=0, help="VAL_LOSS_EVERY (train/val pairs under the table)")
    run.add_argument("--loss-at", type=int, nargs="+", default=[100, 200], help="steps whose train loss to show")
    run.add_argument("--window", action="append", default=[], help="A:B, mean ms/step between logged steps")
    run.add_argument("--expect-same-losses", action="store_true",
                     help="exit 1 unless every run logs the first run's train losses bit for bit")
    run.add_argument("--peak-tflops", type=float, default=989.0, help="bf16 per GPU, spec (H100/H200 SXM: 989)")
    run.add_argument("--matmul-tflops", type=float, default=0.0, help="measured bf16 rate per GPU (0: measure it)")
    run.add_argument("--timeout", type=float, default=900.0, help="seconds per run")
    run.add_argument("--budget", type=float, default=0.0, help="seconds for all runs together (0: no cap)")
    run.add_argument("--caseops", default=".carry/wiki_caseops", help="CaseOps sp8192 DATA_PATH (presets 0427*)")
    run.add_argument("--caseops-tokenizer", default=".carry/caseops8192.model")
    run.add_argument("--sp8192", default=".carry/wiki8192", help="plain sp8192 DATA_PATH (preset 0409)")
    run.add_argument("--sp8192-tokenizer", default=".carry/sp8192.model")
    run.add_argument("--out-dir", type=Path, default=Path(os.environ.get("OUT", "/tmp")) / "step_time")
    variants = modes.add_parser("micro", help="one compiled micro-step per model-code variant")
    variants.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    variants.add_argument("--variants", nargs="+", default=list(VARIANTS))
    variants.add_argument("--iters", type=int, default=16)
    variants.add_argument("--tokens", choices=("random", "shard"), default="random",
                          help="micro-batch tokens: uniform random ids, or the first train shard (DATA_PATH)")
    variants.add_argument("--profile", type=int, default=0, metavar="K",
                          help="also profile 2 micro-steps per variant: kernel families and the top K kernels")
    prof = modes.add_parser("profile", help="where a step's GPU time goes")
    prof.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    prof.add_argument("--warmup", type=int, default=4)
    prof.add_argument("--steps", type=int, default=3)
    prof.add_argument("--top", type=int, default=30)
    prof.add_argument("--trace", type=Path, default=None)
    attn = modes.add_parser("attention", help="the recipe's attention kernels alone, on its packed rows")
    attn.add_argument("--backends", nargs="+", default=["torch_varlen", "fa4_varlen", "fa3_varlen", "flex"])
    attn.add_argument("--dense", nargs="+", default=["cudnn_attention", "flash_attention", "efficient_attention"])
    attn.add_argument("--rows", type=int, default=4)
    attn.add_argument("--iters", type=int, default=10)
    args = parser.parse_args()
    return {"flops": train, "train": train, "micro": micro, "profile": profile, "attention": attention}[args.mode](args)

if __name__ == "__main__":
    sys.exit(main())
