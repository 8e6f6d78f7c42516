"""The phased LoRA TTT eval alone on one GPU: the seeded (untrained) RECIPE=2026-04-27 model, the val documents of
DATA_PATH, the trainer's warm-up, schedule and loop; prints its log lines (the warm-up, the phases, the loop)."""
import os, sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path.cwd() / "bench"))
from harness import load_trainer  # bench/harness.py (trainer_module.py when run)
t0 = time.perf_counter()
tg = load_trainer()
h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE="2026-04-27"))
dist_info = tg.init_distributed({})
class Log:
    def log(self, msg, console=True):
        print("[%6.1f] %s" % (time.perf_counter() - t0, msg), flush=True)
log = Log()
val = tg.load_validation_data(h, tg.load_tokenizer(h, log), dist_info.device)
kernels = tg.select_kernels(h, dist_info)
model = tg.build_model(h, dist_info.device)
tg.use_kernels(model, *(kernels[p][0] for p in ("attention", "qk", "mlp", "ce", "doc_attention")))
model.looping = True
split = {}
log.log("start: val targets %d" % val.num_targets)
result = tg.phased_ttt_eval(h, dist_info, log, model, tg.device_tokens(val, dist_info.device), val.target_bytes, split)
log.log("result %s split %s" % (result, {k: round(v, 1) for k, v in split.items()}))
