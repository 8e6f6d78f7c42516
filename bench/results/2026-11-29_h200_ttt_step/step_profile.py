"""Where a phased-TTT LoRA step's time goes, one GPU: the seeded RECIPE=2026-04-27 model, the trainer's own warm-up
(cold compile unless the caches are warm), then LoRA steps exactly as lora_ttt_batch runs them (forward, masked
backward, AdamW) at a few (rows, row length): wall ms per step, then a torch.profiler pass over 3 steps listing the
CUDA kernels by device time and the CPU ops by self time. TRAINER picks the trainer file; SHAPES "rows:len,...";
FUSED_ADAMW=1 builds the adapters' AdamW with fused=True, 0 the foreach default (unset: the trainer's, fused on
a GPU since this folder's call 2); AB=1 instead times each shape's steps with both, alternating, on one compile.
PROFILE=0 skips the profiler pass. Each shape's timed steps also report Python's garbage collections (count per
generation, ms in them); GC_AB=1 then times every shape again after gc.freeze() (the objects alive after the
warm-up, compiled code included, no longer traversed by a collection)."""
import gc, os, sys, time
from pathlib import Path
import torch
from torch.profiler import ProfilerActivity, profile
sys.path.insert(0, str(Path.cwd() / "bench"))
from harness import load_trainer  # noqa: E402
t0 = time.perf_counter()
tg = load_trainer(Path(os.environ.get("TRAINER", "train_gpt.py")).resolve())
h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE="2026-04-27"))
dist_info = tg.init_distributed({})
kernels = tg.select_kernels(h, dist_info)
model = tg.build_model(h, dist_info.device)
tg.use_kernels(model, *(kernels[p][0] for p in ("attention", "qk", "mlp", "ce", "doc_attention")))
model.looping = True
model.requires_grad_(False).eval()
lora = tg.BatchedLoRA(h, sum(map(len, model.layer_orders[model.looping])), h.ttt_doc_batch, dist_info.device)
adamw = lambda fused: torch.optim.AdamW(lora.parameters(), lr=h.ttt_lora_lr, betas=(0.0, 0.99), eps=1e-10,  # noqa
                                       weight_decay=h.ttt_lora_wd, fused=fused)
fused = os.environ.get("FUSED_ADAMW", "1") == "1"
optimizer = adamw(fused)
optimizers = {"foreach": adamw(False), "fused": adamw(True)} if os.environ.get("AB") == "1" else {}
print("lora params %.1f MB, fused AdamW %s" % (sum(p.numel() for p in lora.parameters()) * 4 / 1e6, fused))
nll_fn = tg.make_lora_nll(h, dist_info, model, lora)
w0 = time.perf_counter()
tg.warm_up_lora_ttt(h, dist_info, model, nll_fn, lora, optimizer)
tg.sync_device(dist_info)
print("[%6.1f] warm-up %.1f s (%s)" % (time.perf_counter() - t0, time.perf_counter() - w0, tg.__file__), flush=True)
chunk, device = h.ttt_lora_chunk, dist_info.device
gen = torch.Generator(device).manual_seed(0)
collections = {}  # generation -> [count, seconds]

def on_gc(phase, info, started=[0.0]):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        entry = collections.setdefault(info["generation"], [0, 0.0])
        entry[0] += 1
        entry[1] += time.perf_counter() - started[0]
gc.callbacks.append(on_gc)
print("gc objects tracked after the warm-up: %d" % len(gc.get_objects()), flush=True)
shapes = os.environ.get("SHAPES", "2:64,2:2048,64:2048").split(",")
shapes += ["freeze"] + shapes if os.environ.get("GC_AB") == "1" else []
for shape in shapes:
    if shape == "freeze":
        gc.freeze()
        print("\ngc.freeze(): %d objects frozen" % gc.get_freeze_count(), flush=True)
        continue
    rows, seq_len = map(int, shape.split(":"))
    x = torch.randint(0, h.vocab_size, (rows, seq_len), device=device, generator=gen)
    y = torch.randint(0, h.vocab_size, (rows, chunk), device=device, generator=gen)
    picks = (seq_len - chunk + torch.arange(chunk, device=device)).repeat(rows, 1)
    scored = torch.ones(rows, chunk, dtype=torch.bool, device=device)
    weight = torch.full((rows,), 1.0 / chunk, device=device)

    def step(optimizer=optimizer):
        with tg.autocast_context(dist_info):
            nll = nll_fn(x, y, picks)
        optimizer.zero_grad(set_to_none=True)
        (torch.where(scored, nll, 0.0) * weight[:, None]).sum().backward()
        optimizer.step()
    for _ in range(3):
        step()
    tg.sync_device(dist_info)
    collections.clear()
    begin = time.perf_counter()
    for _ in range(20):
        step()
    tg.sync_device(dist_info)
    wall = (time.perf_counter() - begin) / 20 * 1000
    print("rows %d len %d: wall %.1f ms/step over 20 steps; gc during them: %s" % (rows, seq_len, wall, " ".join(
        "gen%d %dx %.1f ms" % (g, n, 1000 * t) for g, (n, t) in sorted(collections.items())) or "none"), flush=True)
    if optimizers:
        ms = {name: [] for name in optimizers}
        for _ in range(5):
            for name, opt in optimizers.items():
                step(opt)
                tg.sync_device(dist_info)
                begin = time.perf_counter()
                for _ in range(4):
                    step(opt)
                tg.sync_device(dist_info)
                ms[name].append((time.perf_counter() - begin) / 4 * 1000)
        print("AB rows %d len %d: %s" % (rows, seq_len, "  ".join(
            "%s %.1f ms (min %.1f)" % (name, sum(v) / len(v), min(v)) for name, v in ms.items())), flush=True)
    if os.environ.get("PROFILE", "1") == "0":
        continue
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(3):
            step()
        tg.sync_device(dist_info)
    events = prof.key_averages()
    device_ms = sum(e.self_device_time_total for e in events) / 1000 / 3
    print("\n==== rows %d len %d: wall %.1f ms/step, device busy %.1f ms/step, kernels/step %d" % (
        rows, seq_len, wall, device_ms, sum(e.count for e in events if e.self_device_time_total > 0) // 3))
    print(events.table(sort_by="self_device_time_total", row_limit=25, max_name_column_width=70))
    print(events.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=70))
print("[%6.1f] done" % (time.perf_counter() - t0))
