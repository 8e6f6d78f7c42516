"""The one harness of the bench scripts: run train_gpt.py with given settings on N GPUs and parse its log, or import
it as a module; make the packages a recipe needs importable on a bare GPU image; run several benchmarks side by
side, one per GPU. Only the standard library at import time (a GPU image may have nothing but python3 and torch).

  python3 bench/harness.py gpus SECONDS COMMAND [COMMAND ...]   # command i on GPU i alone, each under a timeout
  eval "$(python3 bench/harness.py preflight NAME)"             # in a shell script: wheels + data paths checked

`gpus` runs each command under `timeout SECONDS` with CUDA_VISIBLE_DEVICES=i, its output in $OUT/gpu<i>.txt
(./logs/gpus/ without $OUT), and prints each output's last lines when all are done. Leftover train_gpt.py processes
on the GPUs are killed once, first. Runs side by side share the host's CPUs and disk: compare a step time measured
beside others only with rows of the same command (same GPU, same neighbours)."""
import importlib.util
import os, re, signal, subprocess, sys, threading, time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]
WHEELS, SITE = REPO / ".whl", Path("/tmp/site")  # wheels carried to a device machine, and where they go
RECIPE_MODULES = ("brotli", "constriction")  # COMPRESSOR=brotli / ans; a GPU image has neither

STEP_LINE = re.compile(r"^step:(\d+)/\d+ train_loss:([\d.]+) train_time:(\d+)ms step_avg:([\d.]+)ms")
VAL_LINE = re.compile(r"^step:(\d+)/\d+ val_loss:([\d.]+) val_bpb:([\d.]+)")
WAIT_LINE = re.compile(r"^data_wait total_ms:[\d.]+ per_step_ms:([\d.]+)(?: fraction_of_train_time:([\d.]+))?")
PEAK_LINE = re.compile(r"^peak memory allocated: (\d+) MiB")
LOOP_LINE = re.compile(r"^layer_loop:enabled step:(\d+)")
KERNEL_LINE = re.compile(r"^(attention_backend|doc_attention_backend|qk_kernel|mlp_kernel|ce_kernel):(\S+)")
KERNEL_SHORT = {"attention_backend": "attn", "doc_attention_backend": "doc", "qk_kernel": "qk", "mlp_kernel": "mlp",
                "ce_kernel": "ce"}


def load_trainer(path: Path = REPO / "train_gpt.py", needed=()):
    """train_gpt.py (or another commit's copy) as a module, failing clearly when it lacks a name a benchmark needs."""
    if not path.is_file():
        sys.exit(f"{path}: no such file (run from the repo root or pass --module)")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before exec: @dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    missing = [name for name in needed if not hasattr(module, name)]
    if missing:
        sys.exit(f"{path} lacks the names this benchmark needs: {', '.join(missing)}")
    return module


class ConsoleLogger:
    """The trainer's Logger interface without a log file (a benchmark's output is its table)."""

    def log(self, msg: str, console: bool = True) -> None:
        print(msg, flush=True)


def configure_kernels(tg, h, dist_info, model) -> tuple:
    """Selects and sets the attention backend and the fused q/k, MLP and CE kernels as the trainer's `run` does.
    Returns (short label, description with the reasons)."""
    kernels = tg.select_kernels(h, dist_info)
    parts = [part for part in ("qk", "mlp", "ce") if part in kernels]
    tg.use_kernels(model, kernels["attention"][0], *(kernels[part][0] for part in parts),
                   **({"doc_attention": kernels["doc_attention"][0]} if "doc_attention" in kernels else {}))
    backend, reason = kernels["attention"]
    return (",".join([backend] + ["%s:%s" % (part, kernels[part][0]) for part in parts]),
            " ".join(["%s (%s)" % (backend, reason)] + ["%s_kernel:%s (%s)" % ((part,) + kernels[part])
                                                        for part in parts]))


def micro_batch_layout(h, dist_info) -> SimpleNamespace:
    """One rank's place in the SPEC §3 stream: each micro-step takes world_size spans of local_tokens + 1 tokens."""
    local_tokens = h.train_batch_tokens // (dist_info.world_size * dist_info.grad_accum_steps)
    return SimpleNamespace(rank=dist_info.rank, world_size=dist_info.world_size, local_tokens=local_tokens,
                           seq_len=h.train_seq_len, span=local_tokens + 1)


def torchrun(nproc: int, *args) -> list:
    """torch's launcher of this Python (a bare image puts no `torchrun` on PATH)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
            *map(str, args)]


def stop_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:  # already gone
        pass


def parse_log_line(result: dict, line: str) -> None:
    """Folds one trainer log line into `result` (see run_trainer)."""
    if match := STEP_LINE.match(line):
        step = int(match.group(1))
        result["steps"], result["step_avg"] = step, float(match.group(4))
        result["loss"][step], result["train_ms"][step] = match.group(2), float(match.group(3))
    elif match := VAL_LINE.match(line):
        result["val"][int(match.group(1))] = (match.group(2), match.group(3))
    elif match := WAIT_LINE.match(line):
        result["wait_ms"] = float(match.group(1))
        result["wait_fraction"] = float(match.group(2)) if match.group(2) else None
    elif match := PEAK_LINE.match(line):
        result["peak_mib"] = int(match.group(1))
    elif match := LOOP_LINE.match(line):
        result["loop_step"] = int(match.group(1))
    elif match := KERNEL_LINE.match(line):
        result["kernels"].setdefault(KERNEL_SHORT[match.group(1)], match.group(2))
    elif line.startswith("error"):
        result["errors"].append(line.strip())


def run_trainer(args: list, env: dict, nproc: int, log_path: Path, timeout: float = 0.0,
                stop_at_peak: bool = False) -> dict:
    """`torchrun --nproc_per_node=nproc ARGS` (ARGS: train_gpt.py or another script) in the repository root with
    `env`; its output goes to log_path and, each line after the seconds since the launch, to <log>.stamped (where a
    run stalls). stop_at_peak: stopped at the `peak memory` line, the end of training, so the end-of-run evals cost no
    time. timeout > 0: stopped then, also while it prints nothing. Returns what the log said: the last step_avg and
    step, train loss and train_time per logged step, val (loss, bpb) per step, data wait per step, peak MiB, the step
    looping switched on, the kernels chosen, error lines, and the exit code."""
    result = {"step_avg": None, "steps": 0, "peak_mib": None, "wait_ms": None, "wait_fraction": None, "loss": {},
              "train_ms": {}, "val": {}, "loop_step": None, "kernels": {}, "errors": [], "returncode": None}
    started = time.perf_counter()
    with open(log_path, "w") as log, open(log_path.with_suffix(".stamped"), "w") as stamped, subprocess.Popen(
            torchrun(nproc, *args), cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True) as process:
        stop = threading.Timer(max(timeout, 0.0), stop_group, (process.pid,)) if timeout else None
        if stop:
            stop.start()
        for line in process.stdout:
            log.write(line)
            stamped.write("%8.1f %s" % (time.perf_counter() - started, line))
            stamped.flush()
            parse_log_line(result, line)
            if stop_at_peak and result["peak_mib"] is not None:
                stop_group(process.pid)
                break
        if stop:
            stop.cancel()
        result["returncode"] = process.wait(timeout=60)
    return result


def window_ms(train_ms: dict, window: str) -> str:
    """Mean ms/step from logged step A to logged step B of "A:B" (B empty: the last logged step)."""
    first, _, last = window.partition(":")
    first, last = int(first), int(last) if last else max(train_ms, default=0)
    if first not in train_ms or last not in train_ms or last <= first:
        return "n/a"
    return "%.2f" % ((train_ms[last] - train_ms[first]) / (last - first))


def install_wheels(modules=RECIPE_MODULES, required: bool = True) -> dict:
    """Makes `modules` importable for this Python and its children: from the carried .whl/ wheels into /tmp/site
    where the image lacks one. Returns the environment entries it set (empty when nothing was missing). Without
    wheels: exits when `required`, else says so and goes on (a run whose recipe needs them then names the module)."""
    probe = "import " + ", ".join(modules)
    if subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0:
        return {}
    wheels = sorted(map(str, WHEELS.glob("*.whl")))
    if not wheels:
        message = f"{sys.executable} lacks one of {', '.join(modules)} and {WHEELS} holds no wheel"
        if required:
            sys.exit(message)
        print(message, file=sys.stderr, flush=True)
        return {}
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--target", str(SITE), *wheels], check=True, stdout=sys.stderr)
    entries = {"PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")])),
               "PATH": os.pathsep.join([str(SITE / "bin"), os.environ.get("PATH", "")])}
    os.environ.update(entries)
    sys.path.insert(0, str(SITE))
    return entries


def check_paths(name: str, *paths) -> None:
    for path in paths:
        if not path or not Path(path).exists():
            sys.exit(f"{name}: {path!r} does not exist (DATA_PATH / TOKENIZER_PATH, or the data flags: --help)")


def kill_leftover_trainers() -> None:
    """A previous call's train_gpt.py workers still on the GPUs are killed (they would skew every timing)."""
    try:
        pids = subprocess.run(["nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader"], text=True,
                              capture_output=True, timeout=30).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return
    for pid in (int(p) for p in pids if p.isdigit()):
        try:
            if b"train_gpt.py" in Path(f"/proc/{pid}/cmdline").read_bytes():
                print(f"killing leftover trainer pid {pid}", flush=True)
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def side_by_side(seconds: int, commands: list) -> int:
    gpus = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                          text=True).stdout.split()
    if len(commands) > len(gpus):
        sys.exit(f"gpus: {len(commands)} commands but {len(gpus)} GPU(s)")
    install_wheels(required=False)  # the children inherit PYTHONPATH
    kill_leftover_trainers()
    out = Path(os.environ.get("OUT", REPO / "logs" / "gpus"))
    out.mkdir(parents=True, exist_ok=True)
    # torchrun sets OMP_NUM_THREADS=1 only for several processes: N single-GPU runs would each take every core
    threads = os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // len(commands))))
    jobs = []
    for index, command in enumerate(commands):
        print(f"== gpu{index}: {command}", flush=True)
        env = dict(os.environ, CUDA_VISIBLE_DEVICES=str(index), OMP_NUM_THREADS=threads, LEFTOVERS_KILLED="1")
        with open(out / f"gpu{index}.txt", "w") as handle:
            jobs.append(subprocess.Popen(["timeout", "-k", "20", str(seconds), "bash", "-c", command], cwd=REPO,
                                         env=env, stdout=handle, stderr=subprocess.STDOUT))
    status = max(job.wait() != 0 for job in jobs)
    for index, command in enumerate(commands):
        lines = (out / f"gpu{index}.txt").read_text(errors="replace").splitlines()
        print(f"\n==== gpu{index}: {command} (full output: {out}/gpu{index}.txt)\n" + "\n".join(lines[-40:]))
    return int(status)


def main() -> int:
    if len(sys.argv) >= 4 and sys.argv[1] == "gpus":
        return side_by_side(int(sys.argv[2]), sys.argv[3:])
    if len(sys.argv) == 3 and sys.argv[1] == "preflight":  # for shell scripts: prints the exports to eval
        entries = install_wheels()
        check_paths(sys.argv[2], os.environ.get("DATA_PATH"), os.environ.get("TOKENIZER_PATH"))
        print("".join(f"export {key}='{value}'\n" for key, value in entries.items()), end="")
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
