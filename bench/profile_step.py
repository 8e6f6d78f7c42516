"""Profile training steps of train_gpt.py at the configured shape (env vars, record config by default).

Builds the model, optimizers and loader through the trainer's own functions, compiles as `train` does, runs
--warmup steps, then:
  1. times --steps steps twice: with a host sync after every step (as the training loop's wallclock check does)
     and without, so the cost of that sync shows;
  2. profiles --steps steps with torch.profiler and prints the top kernels by GPU time, a summary by kernel
     family (GEMM, attention, Triton/fused elementwise, NCCL, copies, other) and the GPU-busy fraction;
  3. writes a Chrome trace (gzip) to --trace when given.
Under torchrun (several GPUs) rank 0 reports, and also how much of the NCCL kernel time (Parallel Muon's
reduce-scatters/all-gathers, the small all-reduces) ran while a compute kernel was running on another stream.

  DATA_PATH=... TOKENIZER_PATH=... python bench/profile_step.py --steps 3 --trace $OUT/trace.json.gz
"""
import argparse
import bisect
import gzip
import json
import os
import shutil
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trainer_module import REPO, configure_kernels, load_trainer  # noqa: E402

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
    for label, needles in FAMILIES:
        if any(needle in lowered for needle in needles):
            return label
    return "other"


def overlap_report(device_events, steps: int) -> str:
    """Per NCCL kernel kind: time per step and the part of it during which a non-NCCL kernel also ran (hidden)."""
    compute = sorted((e.time_range.start, e.time_range.end) for e in device_events if "nccl" not in e.name.lower())
    merged = []
    for start, end in compute:
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--trace", type=Path, default=None)
    args = parser.parse_args()
    tg = load_trainer(args.module, needed=("Hyperparameters", "build_model", "Optimizers", "make_train_loader",
                                           "run_micro_steps", "select_attention_backend", "WeightAverages"))
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

    def synchronize() -> None:
        if cuda:
            torch.cuda.synchronize()

    def step(sync: bool) -> None:
        optimizers.zero_grad()
        tg.run_micro_steps(dist_info, model, loader, lambda phase: None)
        optimizers.set_schedule(1.0, h.muon_momentum)
        if h.grad_clip_norm > 0:
            torch.nn.utils.clip_grad_norm_(base_model.parameters(), h.grad_clip_norm)
        optimizers.step()
        optimizers.zero_grad()
        averages.update_ema()
        if sync:
            synchronize()

    start = time.perf_counter()
    for _ in range(args.warmup):
        step(sync=True)
    print("warmup (compile included): %.1f s" % (time.perf_counter() - start), flush=True)
    timings = {}
    for sync in (True, False, True, False):
        synchronize()
        start = time.perf_counter()
        for _ in range(args.steps):
            step(sync)
        synchronize()
        timings.setdefault(sync, []).append(1000.0 * (time.perf_counter() - start) / args.steps)
    for sync, values in timings.items():
        print("step wall, host sync after each step=%s: %s ms" % (sync, " ".join("%.2f" % v for v in values)))

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        synchronize()
        start = time.perf_counter()
        for _ in range(args.steps):
            step(sync=True)
        synchronize()
        wall_ms = 1000.0 * (time.perf_counter() - start) / args.steps
    # GPU-side user annotations (e.g. "nccl:all_reduce" ranges) are not kernels: counting them doubles NCCL time
    device_events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
                     and not getattr(e, "is_user_annotation", False) and not e.name.startswith("nccl:")]
    overlap = overlap_report(device_events, args.steps)
    kernels = {}
    for event in device_events if cuda else prof.events():
        if cuda or (event.name.startswith("aten::") and event.cpu_parent is None):
            entry = kernels.setdefault(event.name, [0, 0.0])
            entry[0] += 1
            entry[1] += (event.device_time_total if cuda else event.cpu_time_total) / 1000.0  # us -> ms
    total = sum(ms for _, ms in kernels.values())
    print("\nprofiled %d steps: wall %.2f ms/step (profiler on), kernel time %.2f ms/step (%.1f%% of wall)"
          % (args.steps, wall_ms, total / args.steps, 100.0 * total / args.steps / wall_ms))
    by_family = {}
    for name, (calls, ms) in kernels.items():
        by_family[family(name)] = by_family.get(family(name), 0.0) + ms
    print(overlap)
    print("\n%-12s %12s %8s" % ("family", "ms/step", "share"))
    for label, ms in sorted(by_family.items(), key=lambda item: -item[1]):
        print("%-12s %12.2f %7.1f%%" % (label, ms / args.steps, 100.0 * ms / total))
    print("\n%-100s %7s %10s %7s" % ("kernel", "calls/st", "ms/step", "share"))
    for name, (calls, ms) in sorted(kernels.items(), key=lambda item: -item[1][1])[:args.top]:
        print("%-100s %7.0f %10.2f %6.1f%%" % (name[:100], calls / args.steps, ms / args.steps, 100.0 * ms / total))
    if args.trace is not None and dist_info.is_main:
        args.trace.parent.mkdir(parents=True, exist_ok=True)
        raw = args.trace.with_suffix("") if args.trace.suffix == ".gz" else args.trace
        prof.export_chrome_trace(str(raw))
        if raw != args.trace:
            with open(raw, "rb") as src, gzip.open(args.trace, "wb") as dst:
                shutil.copyfileobj(src, dst)
            raw.unlink()
        print("trace: %s" % args.trace)
    summary = {"wall_ms": wall_ms, "timings": {str(k): v for k, v in timings.items()},
               "families_ms_per_step": {k: v / args.steps for k, v in by_family.items()}}
    print(json.dumps(summary))
    loader.close()
    logger.close()
    if dist_info.distributed:
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
