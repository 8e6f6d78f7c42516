"""GPU diagnosis of the phased TTT's warm-up and step cost (RECIPE=2026-04-27, seeded model, random tokens)."""
import os, sys, time, dataclasses
from pathlib import Path
import torch
sys.path.insert(0, str(Path.cwd() / "bench"))
from harness import load_trainer  # bench/harness.py (trainer_module.py when run)

T0 = time.perf_counter()
BUDGET = float(os.environ.get("DIAG_BUDGET", "480"))
def stamp(msg):
    print("[%7.1f] %s" % (time.perf_counter() - T0, msg), flush=True)

tg = load_trainer()
h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE="2026-04-27"))
dist_info = tg.init_distributed({})
kernels = tg.select_kernels(h, dist_info)
stamp("kernels %s" % {k: v[0] for k, v in kernels.items()})
def make():
    m = tg.build_model(h, dist_info.device)
    tg.use_kernels(m, *(kernels[p][0] for p in ("attention", "qk", "mlp", "ce", "doc_attention")))
    m.looping = True
    return m.requires_grad_(False).eval()
model = make()
stamp("model built")
def sync():
    torch.cuda.synchronize()
def timed(fn, n=1):
    sync(); t = time.perf_counter()
    for _ in range(n):
        fn()
    sync(); return (time.perf_counter() - t) / n

ctx, chunk, dev = h.effective_eval_seq_len, h.ttt_lora_chunk, dist_info.device
gen = torch.Generator(dev).manual_seed(0)
def batch(rows, seq_len):
    x = torch.randint(0, h.vocab_size, (rows, seq_len), device=dev, generator=gen)
    y = torch.randint(0, h.vocab_size, (rows, chunk), device=dev, generator=gen)
    picks = (seq_len - chunk + torch.arange(chunk, device=dev)).repeat(rows, 1)
    return x, y, picks
def stepper(nll_fn, optimizer, x, y, picks):
    def step():
        with tg.autocast_context(dist_info):
            nll = nll_fn(x, y, picks)
        nll.mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step
def lora_set(hh):
    lora = tg.BatchedLoRA(hh, sum(map(len, model.layer_orders[True])), hh.ttt_doc_batch, dev)
    opt = torch.optim.AdamW(lora.parameters(), lr=hh.ttt_lora_lr, betas=(0.0, 0.99), eps=1e-10,
                            weight_decay=hh.ttt_lora_wd)
    return lora, opt

# A. the warm-up, call by call (as warm_up_lora_ttt runs it)
stamp("A. SGD forward+backward (eager model, packed row)")
seqs = min(h.ttt_batch_seqs, tg.ceil_div(h.ttt_chunk_tokens // h.train_seq_len, 1))
row = torch.randint(0, h.vocab_size, (1, seqs * h.train_seq_len + 1), device=dev, generator=gen)
cu = torch.from_numpy(tg.document_cu_seqlens(row[0, :-1].cpu().numpy(), tg.BOS_ID, h.train_seq_len,
                                             tg.CU_SEQLENS_BUCKET)).to(dev)
def sgd():
    with tg.autocast_context(dist_info):
        loss = model(row[:, :-1], row[:, 1:], cu)
    loss.backward()
tg.prepare_ttt_parameters(model.requires_grad_(True).train(), 0)
for i in range(3):
    stamp("  sgd call %d: %.2f s" % (i, timed(sgd)))
model.eval().requires_grad_(False).zero_grad(set_to_none=True)
lora, opt = lora_set(h)
nll_fn = tg.make_lora_nll(h, dist_info, model, lora)
lengths = sorted({tg.lora_context(end, ctx) for end in range(chunk, ctx + chunk)})
shapes = [(h.ttt_doc_batch, n) for n in lengths] + [(1 << k, lengths[0]) for k in range(1, (h.ttt_doc_batch - 1).bit_length())]
stamp("A. LoRA warm-up shapes %s" % shapes)
for rows, n in shapes:
    stamp("  lora rows %d len %d: %.2f s" % (rows, n, timed(stepper(nll_fn, opt, *batch(rows, n)))))
import torch._dynamo.utils as du
print(du.compile_times(repr="str", aggregate=True), flush=True)

# B. compiled step costs; C. eager; D. reduce-overhead
GRID = [(r, n) for r in (64, 16, 4, 2) for n in (64, 256, 512, 1024, 2048)]
def grid(label, nll_fn, opt, repeats=5):
    stamp("%s: rows len first_s ms" % label)
    out = {}
    for rows, n in GRID:
        if time.perf_counter() - T0 > BUDGET:
            stamp("budget reached"); return out
        step = stepper(nll_fn, opt, *batch(rows, n))
        first = timed(step)
        ms = 1000 * timed(step, repeats)
        out[(rows, n)] = ms
        print("  %-14s %4d %5d %7.2f %8.1f" % (label, rows, n, first, ms), flush=True)
    return out
grid("compiled", nll_fn, opt)
eager_h = dataclasses.replace(h, torch_compile="0")
lora_e, opt_e = lora_set(eager_h)
grid("eager", tg.make_lora_nll(eager_h, dist_info, model, lora_e), opt_e, repeats=3)
# D: the trainer's nll compiled with mode=reduce-overhead (CUDA graphs per shape)
orig_compile = torch.compile
torch.compile = lambda fn, **kw: orig_compile(fn, mode="reduce-overhead", **kw)
lora_g, opt_g = lora_set(h)
nll_g = tg.make_lora_nll(h, dist_info, model, lora_g)
torch.compile = orig_compile
stamp("D. reduce-overhead first call")
try:
    grid("cudagraphs", nll_g, opt_g)
except Exception as exc:
    stamp("cudagraphs failed: %s: %s" % (type(exc).__name__, str(exc)[:500]))
stamp("done")
