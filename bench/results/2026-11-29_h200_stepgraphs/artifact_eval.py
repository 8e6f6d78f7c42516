"""The phased LoRA TTT eval alone of an artifact on one GPU: TRAINER (a trainer file, default train_gpt.py) loads
ARTIFACT (a RECIPE=2026-04-27 int6 artifact) and scores the val documents of DATA_PATH, so two commits run the same
eval on the same weights. Prints the trainer's TTT log lines, then `result val_loss val_bpb warmup_s loop_s`."""
import os, sys, time
from pathlib import Path
sys.path.insert(0, str(Path.cwd() / "bench"))
from harness import configure_kernels, load_trainer  # noqa: E402
t0 = time.perf_counter()
tg = load_trainer(Path(os.environ.get("TRAINER", "train_gpt.py")).resolve())
h = tg.Hyperparameters.from_env(dict(os.environ, RECIPE="2026-04-27"))
dist_info = tg.init_distributed({})

class Log:
    def log(self, msg, console=True):
        print("[%6.1f] %s" % (time.perf_counter() - t0, msg), flush=True)

def make_model():
    model = tg.build_model(h, dist_info.device)
    configure_kernels(tg, h, dist_info, model)
    return model

log = Log()
val = tg.load_validation_data(h, tg.load_tokenizer(h, log), dist_info.device)
model = tg.load_artifact_model(os.environ["ARTIFACT"], make_model)
model.looping = h.num_loops > 0
split = {}
log.log("start: %s on %s" % (tg.__file__, os.environ["ARTIFACT"]))
loss, bpb = tg.phased_ttt_eval(h, dist_info, log, model, tg.device_tokens(val, dist_info.device), val.target_bytes,
                               split)
log.log("result val_loss %.10f val_bpb %.10f warmup_s %.1f loop_s %.1f" % (loss, bpb, split["ttt_warmup"],
                                                                           split["ttt_loop"]))
