"""Eval logit dtype (issue 18, item 7): the sliding-window eval of a trained `final_model.pt`, scored three ways on
the same windows with the trainer's own functions (build_model, score_windows, the compiled scoring forward):

  (a) trainer   bf16 autocast forward, logits soft-capped in fp32 (GPT.logits_from_hidden), CE in fp32
  (b) record    the same forward, but the soft cap applied to the bf16 logits (the record's compiled eval), CE fp32
  (c) fp32      a full-fp32 copy of the model, no autocast, no TF32, SDPA math attention: the "true" score

    python3 bench/eval_dtype.py --model logs/<RUN_ID>/final_model.pt [--max-windows 16384] [--stride 64]

Run it with the training run's environment (DATA_PATH, TOKENIZER_PATH and any model setting that run changed):
the model is rebuilt from those settings and the state dict is loaded strictly. --max-windows takes that many
windows evenly spaced over the validation set (0: all 969,088 of the record config); all three methods score the
same windows. Prints one table; on a CPU all three are fp32 and agree."""
import argparse
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import ConsoleLogger, configure_kernels, load_trainer  # noqa: E402


class RecordSoftcap:
    """Scores like the record: the soft cap runs on the bf16 logits (under autocast), one rounding at the end as
    in its compiled logits forward; CE (score_windows) upcasts afterwards."""

    def __init__(self, tg, model, compiled: bool):
        self.model, self.rms_norm = model, tg.rms_norm
        self.head = torch.compile(self._head, dynamic=False) if compiled else self._head

    def _head(self, hidden):
        x = self.rms_norm(hidden)
        weight = self.model.tok_emb.weight if self.model.lm_head is None else self.model.lm_head.weight
        logits = F.linear(x, weight.to(x.dtype))
        return self.model.logit_softcap * torch.tanh(logits / self.model.logit_softcap)

    def logits_from_hidden(self, hidden):
        return self.head(hidden)


class Fp32Scorer:
    """The model in fp32 with autocast off inside (score_windows calls it under the trainer's bf16 autocast)."""

    def __init__(self, model):
        self.model = model

    def forward_hidden(self, ids):
        with torch.autocast(device_type=ids.device.type, enabled=False):
            return self.model.forward_hidden(ids)

    def logits_from_hidden(self, hidden):
        with torch.autocast(device_type=hidden.device.type, enabled=False):
            return self.model.logits_from_hidden(hidden.float())


def spaced_windows(starts, max_windows: int):
    """max_windows starts evenly spaced over `starts` (all of them when max_windows is 0 or too large)."""
    if max_windows <= 0 or max_windows >= starts.numel():
        return starts
    return starts[torch.linspace(0, starts.numel() - 1, max_windows).round().long().unique()]


def score(tg, h, dist_info, scorer, hidden_forward, tokens, target_bytes, windows, stride) -> tuple:
    sums = torch.zeros(3, dtype=torch.float64, device=dist_info.device)
    with torch.inference_mode():
        tg.score_windows(h, dist_info, scorer, hidden_forward, tokens, target_bytes, windows, h.effective_eval_seq_len,
                         stride, sums)
    return tg.bits_per_byte(*sums.tolist())


def measure(tg, h, dist_info, model_path: str, max_windows: int, stride: int) -> dict:
    """{method: (val_loss, val_bpb)} plus the window counts, for the state dict at model_path."""
    device = dist_info.device
    val = tg.load_validation_data(h, tg.load_tokenizer(h, ConsoleLogger()), device)
    tokens = tg.device_tokens(val, device)
    model = tg.build_model(h, device)
    kernels = configure_kernels(tg, h, dist_info, model)[1]
    model.load_state_dict(torch.load(model_path, map_location=device, weights_only=True), strict=True)
    model.eval()
    starts = tg.sliding_window_starts(val.num_targets, h.effective_eval_seq_len, stride)
    windows = spaced_windows(starts, max_windows)
    compiled = tg.compile_enabled(h, dist_info)
    hidden_forward = tg.make_hidden_forward(h, dist_info, model)
    results = {"trainer": score(tg, h, dist_info, model, hidden_forward, tokens, val.target_bytes, windows, stride),
               "record": score(tg, h, dist_info, RecordSoftcap(tg, model, compiled), hidden_forward, tokens,
                               val.target_bytes, windows, stride)}
    model32 = tg.build_model(h, device).float().eval()  # PyTorch forms (no fused ops); SDPA's math backend below
    model32.load_state_dict(model.state_dict(), strict=True)
    tg.use_kernels(model32, "sdpa")
    fp32 = Fp32Scorer(model32)
    tf32 = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
            results["fp32"] = score(tg, h, dist_info, fp32, fp32.forward_hidden, tokens, val.target_bytes, windows, stride)
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = tf32
    return {"scores": results, "windows": windows.numel(), "all_windows": starts.numel(), "kernels": kernels}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="final_model.pt", help="state dict written by train_gpt.py")
    parser.add_argument("--max-windows", type=int, default=16384, help="windows scored, evenly spaced; 0: all")
    parser.add_argument("--stride", type=int, default=0, help="sliding stride (default: EVAL_STRIDE)")
    args = parser.parse_args()
    if not os.path.isfile(args.model):
        sys.exit(f"--model {args.model}: no such file (train_gpt.py writes logs/<RUN_ID>/final_model.pt)")
    tg = load_trainer(needed=("score_windows", "sliding_window_starts", "make_hidden_forward", "build_model"))
    h = tg.Hyperparameters.from_env(dict(os.environ))
    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    if device.type == "cuda":  # as the trainer's run()
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    dist_info = tg.DistInfo(rank=0, world_size=1, device=device)
    stride = args.stride or h.eval_stride
    out = measure(tg, h, dist_info, args.model, args.max_windows, stride)
    name = torch.cuda.get_device_name(0) if device.type == "cuda" else "cpu"
    print(f"device:{name} torch:{torch.__version__} kernels:{out['kernels']}")
    print(f"windows:{out['windows']} of {out['all_windows']} (window {h.effective_eval_seq_len}, stride {stride})")
    scores, true_bpb = out["scores"], out["scores"]["fp32"][1]
    labels = {"trainer": "(a) trainer: fp32 softcap", "record": "(b) record: bf16 softcapped logits",
              "fp32": "(c) fp32 reference forward"}
    print(f"\n{'method':38} {'val_loss':>12} {'val_bpb':>12} {'bpb - fp32':>12}")
    for key, label in labels.items():
        loss, bpb = scores[key]
        print(f"{label:38} {loss:12.8f} {bpb:12.8f} {bpb - true_bpb:+12.2e}")
    difference = scores["trainer"][1] - scores["record"][1]
    errors = {key: abs(scores[key][1] - true_bpb) for key in ("trainer", "record")}
    closer = "equally close" if errors["trainer"] == errors["record"] else labels[min(errors, key=errors.get)]
    print(f"\n(a) - (b) bpb: {difference:+.2e}; closer to fp32: {closer}")


if __name__ == "__main__":
    main()
