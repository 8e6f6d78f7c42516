"""The fused softcapped cross-entropy op of train_gpt.py (CE_KERNEL, SPEC_0427 §6.5) against the PyTorch form it
replaces in training (F.cross_entropy of 30 tanh(x / 30) in fp32, eager and compiled), at the 04-27 record's shape:
98,304 rows (one micro-batch of 48 x 2048 tokens) x 8,192 bf16 logits before the softcap, mean over rows. Prints:
  1. forward+backward GPU ms per call and the peak memory above the inputs, per form and per launch configuration
     of the fused op (columns per block x warps; the shipped one is marked);
  2. the largest differences to an fp64 reference from the same bf16 inputs (loss, dx relative to its largest value).
One GPU call, about a minute:

  python bench/ce_kernel.py
  python bench/ce_kernel.py --configs 1024x4 2048x8 --rows 16384   # a sweep of BLOCK x num_warps

Without CUDA it runs the same tables on the CPU (host timings, no memory column, no compiled forms) for a check of
its logic, e.g. TRITON_INTERPRET=1 python bench/ce_kernel.py --rows 6 --vocab 1500 --iters 1 --configs 1024x4
"""
import argparse, sys, time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import REPO, load_trainer  # noqa: E402


def timed_ms(fn, iters: int, cuda: bool) -> float:
    """Wall ms per call after 2 warm-up calls, synchronised (each call is ~1 ms or more of GPU work on an H100)."""
    for _ in range(2):
        fn()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        fn()
    if cuda:
        torch.cuda.synchronize()
    return 1000.0 * (time.perf_counter() - start) / iters


def peak_mib(fn, cuda: bool) -> str:
    """Peak allocated memory of one call above what was allocated before it (inputs, cached kernels)."""
    if not cuda:
        return "-"
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return "%.0f" % ((torch.cuda.max_memory_allocated() - before) / 2 ** 20)


def ce_table(tg, args, device) -> None:
    cuda = device.type == "cuda"
    softcap = args.softcap
    generator = torch.Generator(device=device).manual_seed(0)
    # logits of the size a trained model's have: a few past the softcap, most well inside
    logits = (torch.randn(args.rows, args.vocab, device=device, generator=generator) * 8).bfloat16().requires_grad_()
    targets = torch.randint(args.vocab, (args.rows,), device=device, generator=generator)

    def plain(x, t):
        return F.cross_entropy(softcap * torch.tanh(x.float() / softcap), t)
    op = tg.fused_ce_op()
    fused = lambda x, t: op(x, t, softcap).mean()  # noqa: E731  (GPT.forward's call)
    forms = [("PyTorch eager", plain, "")]
    if cuda:
        forms += [("PyTorch compiled", torch.compile(plain, dynamic=False), "")]
    shipped = "%dx%d" % (tg.CE_BLOCK, tg.CE_NUM_WARPS)
    for text in args.configs:
        forms.append(("fused " + text + (" (shipped)" if text == shipped else ""), fused, text))
    if cuda:
        forms.append(("fused shipped, compiled", torch.compile(fused, dynamic=False), shipped))

    print("rows=%d vocab=%d softcap=%g, bf16 logits (%.0f MiB); mean over rows" % (
        args.rows, args.vocab, softcap, logits.numel() * 2 / 2 ** 20))
    print("\n1. forward+backward per call")
    print("%-30s %10s %16s" % ("form", "ms", "peak MiB above"))
    results = {}
    for name, fn, launch in forms:
        if launch:
            block, warps = (int(part) for part in launch.split("x"))
            tg.CE_BLOCK, tg.CE_NUM_WARPS = block, warps

        def step(fn=fn):
            loss = fn(logits, targets)
            return loss, torch.autograd.grad(loss, logits)[0]
        try:
            ms = timed_ms(step, args.iters, cuda)
            memory = peak_mib(step, cuda)
            results[name] = step()
        except Exception as exc:  # e.g. a launch configuration that does not compile: report and go on
            print("%-30s failed: %s" % (name, str(exc).splitlines()[0][:90] if str(exc) else type(exc).__name__))
            continue
        print("%-30s %10.3f %16s" % (name, ms, memory), flush=True)
    tg.CE_BLOCK, tg.CE_NUM_WARPS = (int(part) for part in shipped.split("x"))

    print("\n2. largest differences to an fp64 reference from the same bf16 inputs (dx: relative to its largest)")
    reference_input = logits.detach().double().requires_grad_()
    reference = F.cross_entropy(softcap * torch.tanh(reference_input / softcap), targets)
    reference_dx = torch.autograd.grad(reference, reference_input)[0]
    print("%-30s %12s %12s" % ("form", "loss", "dx"))
    for name, (loss, dx) in results.items():
        print("%-30s %12.2e %12.2e" % (name, abs(loss.item() - reference.item()),
                                       ((dx.double() - reference_dx).abs().max() / reference_dx.abs().max()).item()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=REPO / "train_gpt.py")
    parser.add_argument("--rows", type=int, default=98304)
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--softcap", type=float, default=30.0)
    parser.add_argument("--configs", nargs="+", default=["1024x4", "1024x8", "2048x8", "4096x8", "4096x16"],
                        help="fused op launches to time: BLOCK (columns per step) x num_warps")
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    tg = load_trainer(args.module, needed=("fused_ce_op", "CE_BLOCK"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if tg.triton is None:
        sys.exit("ce_kernel.py needs the triton package")
    print("device: %s, torch %s" % (torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                                    torch.__version__))
    ce_table(tg, args, device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
