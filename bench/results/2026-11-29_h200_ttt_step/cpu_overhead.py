"""CPU: the per-step Python overhead of the phased TTT's LoRA step, whole-forward graph vs per-block compile, on a
tiny-width model with the recipe's block structure (11 layers, looping: 17 block calls), 2 rows x 64 tokens, compiled
(TORCH_COMPILE=1); the step time over 50 steps, then cProfile over 20. TRAINER=path."""
import cProfile, os, pstats, sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path.cwd() / "bench"))
from harness import load_trainer
tg = load_trainer(Path(os.environ["TRAINER"]))
env = dict(RECIPE="2026-04-27", MODEL_DIM="64", NUM_HEADS="4", NUM_KV_HEADS="2", ROPE_DIMS="8", VOCAB_SIZE="1024",
           TRAIN_SEQ_LEN="64", EVAL_SEQ_LEN="128", TTT_LORA_CHUNK="16", TTT_DOC_BATCH="8", TTT_LORA_RANK="4",
           TORCH_COMPILE="1", DATA_PATH="/tmp", TOKENIZER_PATH="/tmp/x.model")
h = tg.Hyperparameters.from_env(env)
dist = tg.DistInfo(0, 1, torch.device("cpu"))
model = tg.build_model(h, torch.device("cpu"))
model.looping = True
model.requires_grad_(False).eval()
lora = tg.BatchedLoRA(h, sum(map(len, model.layer_orders[True])), h.ttt_doc_batch, torch.device("cpu"))
opt = torch.optim.AdamW(lora.parameters(), lr=1e-3, betas=(0.0, 0.99), eps=1e-10, weight_decay=0.5)
nll_fn = tg.make_lora_nll(h, dist, model, lora)
rows, T, C = 2, 64, 16
x = torch.randint(0, 1024, (rows, T)); y = torch.randint(0, 1024, (rows, C))
picks = (T - C + torch.arange(C)).repeat(rows, 1)
def step():
    nll = nll_fn(x, y, picks)
    opt.zero_grad(set_to_none=True)
    nll.sum().backward()
    opt.step()
t = time.perf_counter(); step(); print("first step (compile) %.1f s" % (time.perf_counter() - t), flush=True)
for _ in range(5): step()
t = time.perf_counter()
for _ in range(50): step()
print("step %.2f ms" % ((time.perf_counter() - t) / 50 * 1000), flush=True)
pr = cProfile.Profile(); pr.enable()
for _ in range(20): step()
pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(25)
