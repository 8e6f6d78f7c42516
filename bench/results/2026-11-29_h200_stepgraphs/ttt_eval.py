"""The phased LoRA TTT eval alone, on one GPU or under torchrun: the seeded RECIPE=2026-04-27 model (SEED, the same
on every rank), the val documents of DATA_PATH. Rank 0 prints the trainer's TTT log lines (each rank's scoring
seconds among them), then `result val_loss val_bpb warmup_s loop_s` (full precision)."""
import os, sys, time
from pathlib import Path
import torch
sys.path.insert(0, str(Path.cwd() / "bench"))
from harness import load_trainer  # noqa: E402
t0 = time.perf_counter()
tg = load_trainer(Path("train_gpt.py").resolve())
h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE="2026-04-27"))
dist_info = tg.init_distributed(os.environ)

class Log:
    def log(self, msg, console=True):
        if dist_info.is_main:
            print("[%6.1f] %s" % (time.perf_counter() - t0, msg), flush=True)

log = Log()
val = tg.load_validation_data(h, tg.load_tokenizer(h, log), dist_info.device)
kernels = tg.select_kernels(h, dist_info)
model = tg.build_model(h, dist_info.device)
tg.use_kernels(model, *(kernels[p][0] for p in ("attention", "qk", "mlp", "ce", "doc_attention")))
model.looping = True
split = {}
log.log("start: world %d, val targets %d, kernels %s" % (dist_info.world_size, val.num_targets, kernels))
loss, bpb = tg.phased_ttt_eval(h, dist_info, log, model, tg.device_tokens(val, dist_info.device), val.target_bytes,
                               split)
log.log("result val_loss %.10f val_bpb %.10f warmup_s %.1f loop_s %.1f" % (loss, bpb, split["ttt_warmup"],
                                                                           split["ttt_loop"]))
if dist_info.distributed:
    torch.distributed.destroy_process_group()
