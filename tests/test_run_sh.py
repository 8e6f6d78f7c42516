"""The quick start's launchers, run for real on a copy of the repository: run.sh (presets follow the hardware,
the last line gives the trainer's reason, signals stop the whole job), test.sh and tools/py (one interpreter,
set up by tools/python_env.sh, which installs only what is missing)."""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tgpt_util import REPO, TINY_MODEL_ENV, run_env, tgpt, tiny_data  # noqa: F401 (fixture)

sys.path.insert(0, str(REPO / "tools"))
import job_outcome  # noqa: E402

# Training that runs until it is stopped, logging every step.
ENDLESS = {"ITERATIONS": "100000", "TRAIN_LOG_EVERY": "1", "VAL_LOSS_EVERY": "0"}
# For stand-in trainers: a dataset is named, so run.sh does not build the bundled sample.
NO_SAMPLE = {"DATA_PATH": "unused", "TOKENIZER_PATH": "unused"}


def copy_repo(tmp_path: Path, trainer: str = None) -> Path:
    """The launchers, tools and trainer in a fresh folder (run.sh writes logs/ next to itself); `trainer`
    replaces train_gpt.py's text (a stand-in that fails or sleeps in a chosen way)."""
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("run.sh", "test.sh", "train_gpt.py", "requirements.txt"):
        shutil.copy2(REPO / name, root / name)
    shutil.copytree(REPO / "tools", root / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    if trainer is not None:
        (root / "train_gpt.py").write_text(trainer)
    return root


def job_pids(run_id: str) -> list:
    """Live processes started with RUN_ID=run_id in their environment: run.sh, torchrun, the ranks, tee."""
    marker, pids = ("RUN_ID=%s\0" % run_id).encode(), []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if marker in (entry / "environ").read_bytes() and "State:\tZ" not in (entry / "status").read_text():
                pids.append(int(entry.name))
        except OSError:  # gone, or not ours
            continue
    return pids


@pytest.fixture
def run_id():
    """A RUN_ID of this test's own; whatever still runs with it afterwards is killed (a failing test must not
    leave a training job behind)."""
    value = "t%s" % uuid.uuid4().hex[:12]
    yield value
    for pid in job_pids(value):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def launcher_env(run_id: str, extra: dict) -> dict:
    return run_env(dict({"PYTHON": sys.executable, "RUN_ID": run_id}, **extra))


def run_sh(root: Path, env: dict, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(root / "run.sh"), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=timeout)


def last_line(text: str) -> str:
    return text.rstrip("\n").splitlines()[-1]


def start_and_wait_for(root: Path, env: dict, output: Path, needle: str, timeout: float = 240):
    """Starts run.sh in the background, its output to a file, and returns it once `needle` is printed."""
    with open(output, "w") as handle:
        # SIGINT and SIGHUP as at a terminal: a job started in the background (e.g. a CI runner's `cmd &`) inherits
        # SIGINT ignored, one under nohup SIGHUP, and bash cannot trap a signal that was ignored when it started
        proc = subprocess.Popen([str(root / "run.sh")], env=env, stdout=handle, stderr=subprocess.STDOUT,
                                preexec_fn=lambda: [signal.signal(s, signal.SIG_DFL) for s in (signal.SIGINT,
                                                                                               signal.SIGHUP)])
    deadline = time.monotonic() + timeout
    while needle not in output.read_text():
        assert proc.poll() is None, "run.sh ended before %r:\n%s" % (needle, output.read_text()[-3000:])
        assert time.monotonic() < deadline, "no %r within %d s:\n%s" % (needle, timeout, output.read_text()[-3000:])
        time.sleep(0.2)
    return proc


def assert_job_gone(run_id: str, within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while job_pids(run_id) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = {pid: Path("/proc/%d/cmdline" % pid).read_bytes().replace(b"\0", b" ").decode(errors="replace")
            for pid in job_pids(run_id)}
    assert not left, "processes of the job still running: %s" % left


# ---- invocation errors: refused before anything starts ----
def test_help_and_bad_invocations_are_refused_before_anything_starts(tmp_path, run_id):
    root = copy_repo(tmp_path)
    env = launcher_env(run_id, {})
    shown = run_sh(root, env, "--help", timeout=30)
    assert shown.returncode == 0 and "PRESET" in shown.stdout and "tiny" in shown.stdout, shown.stdout
    assert "tools/py train_gpt.py --help" in shown.stdout  # where every trainer setting is listed
    cases = [((), {"PRESET": "gpu"}, "PRESET=gpu: expected auto, tiny, short or record"),
             (("--iterations", "10"), {}, "unexpected argument '--iterations'"),
             ((), {"NPROC": "two"}, "NPROC=two: expected a positive whole number")]
    for args, extra, message in cases:
        out = run_sh(root, launcher_env(run_id, extra), *args, timeout=30)
        assert out.returncode == 2 and message in last_line(out.stdout), out.stdout
    assert not (root / "logs").exists()


def test_a_run_id_with_logs_is_refused(tmp_path, run_id):
    root = copy_repo(tmp_path)
    (root / "logs").mkdir()
    earlier = root / "logs" / ("%s.txt" % run_id)
    earlier.write_text("an earlier run\n")
    out = run_sh(root, launcher_env(run_id, {}), timeout=30)
    assert out.returncode == 2, out.stdout
    assert "RUN_ID=%s: logs/%s.txt already exists" % (run_id, run_id) in last_line(out.stdout)
    assert earlier.read_text() == "an earlier run\n" and sorted(os.listdir(root / "logs")) == [earlier.name]


# ---- item 2: the preset follows the hardware, not the data paths ----
def test_cpu_preset_applies_with_data_paths_set_and_exported_settings_win(tmp_path, tiny_data, run_id):
    """The issue's command (DATA_PATH/TOKENIZER_PATH set, as the build summary suggests) on a CPU used to
    start the record model. NUM_HEADS=3 from the caller makes the preset's MODEL_DIM=128 fail validation, which
    shows both values reaching the trainer, in a second."""
    root = copy_repo(tmp_path)
    env = launcher_env(run_id, {"DATA_PATH": tiny_data["env"]["DATA_PATH"],
                                "TOKENIZER_PATH": tiny_data["env"]["TOKENIZER_PATH"], "NUM_HEADS": "3"})
    out = run_sh(root, env)
    lines = out.stdout.splitlines()
    assert any(line.startswith("preset: tiny (no usable NVIDIA GPU") for line in lines), out.stdout[-3000:]
    assert any("kept from the environment: NUM_HEADS=3" in line for line in lines), out.stdout[-3000:]
    assert out.returncode == 2, out.stdout[-3000:]
    assert last_line(out.stdout).startswith("run.sh: FAILED (exit 2): invalid configuration:")
    assert "MODEL_DIM=128 must be divisible by NUM_HEADS=3" in last_line(out.stdout)
    # refused before any work: no log claims the RUN_ID, so the corrected run may use it
    assert last_line(out.stdout).endswith("(nothing started; logs/%s.console.txt removed, RUN_ID=%s is free)"
                                          % (run_id, run_id))
    assert not [name for name in os.listdir(root / "logs") if name.startswith(run_id)]
    # the same RUN_ID again passes run.sh's check of it; a Python that lacks a requirement then stops run.sh at its
    # set-up, right after that check (not the trainer's second start-up)
    fake_python(tmp_path / "bin" / "python", tmp_path / "block", "sentencepiece")
    (tmp_path / "block").touch()
    again = run_sh(root, dict(env, PYTHON=str(tmp_path / "bin" / "python")))
    assert again.returncode == 1 and "already exists" not in again.stdout, again.stdout[-3000:]
    assert "setup: PYTHON=%s lacks: sentencepiece>=0.2" % (tmp_path / "bin" / "python") in again.stdout


def copy_repo_with_data_tools(tmp_path: Path) -> Path:
    """copy_repo plus data/'s tools and the bundled sample (linked), so that run.sh can build the sample."""
    root = copy_repo(tmp_path)
    (root / "data" / "sample").mkdir(parents=True)
    for source in (REPO / "data").glob("*.py"):
        shutil.copy(source, root / "data" / source.name)
    (root / "data" / "sample" / "tiny.jsonl.xz").symlink_to(REPO / "data" / "sample" / "tiny.jsonl.xz")
    return root


# A recipe's bundled sample: its build (the recipe's vocabulary; CaseOps for 2026-04-27, SPEC_0427 §2) and where the
# build puts it, the recipe's default DATA_PATH and TOKENIZER_PATH.
SAMPLES = {
    "2026-03-23": (["--vocab-size", "1024"], "fineweb10B_sp1024", "fineweb_1024_bpe.model"),
    "2026-04-09": (["--vocab-size", "8192"], "fineweb10B_sp8192", "fineweb_8192_bpe.model"),
    "2026-04-27": (["--caseops", "--vocab-size", "8192"], "fineweb10B_sp8192_lossless_caps_caseops_v1_reserved",
                   "fineweb_8192_bpe_lossless_caps_caseops_v1_reserved.model")}


# A stand-in trainer that names the settings it was started with, then stops as a refused configuration would.
SETTINGS_TRAINER = """
import os, sys
names = ("RECIPE", "NUM_HEADS", "MODEL_DIM", "LOOP_START", "PARALLEL_START_LAYER", "DATA_PATH", "TOKENIZER_PATH")
print("error: started with " + " ".join("%s=%s" % (name, os.environ.get(name)) for name in names))
sys.exit(2)
"""


@pytest.mark.parametrize("recipe, scaled", [
    ("2026-04-09", "LOOP_START=2 LOOP_END=3 PARALLEL_RESIDUAL_START=4"),
    ("2026-04-27", "LOOP_START=2 LOOP_END=3 PARALLEL_START_LAYER=4")])
def test_a_later_recipe_builds_its_own_sample_and_gets_its_own_tiny_preset(tmp_path, run_id, recipe, scaled):
    """With no dataset named, run.sh builds the recipe's bundled sample (2026-04-09: 8192 tokens; 2026-04-27: CaseOps
    text, 8192 tokens) into the recipe's default paths, and the tiny preset is the recipe's scaled model (its loops and
    its parallel residuals or two lanes on the echoed command), given to the trainer with the caller's NUM_HEADS=3
    (a stand-in here: that the real trainer takes each preset and trains on its sample, tests/test_run_sh_recipes.py
    shows). RECIPE=2026-04-27 used to be refused over the 2026-03-23 preset's WARMDOWN_ITERS and NUM_LAYERS."""
    root = copy_repo_with_data_tools(tmp_path)
    (root / "train_gpt.py").write_text(SETTINGS_TRAINER)
    build, dataset, tokenizer = SAMPLES[recipe]
    out = run_sh(root, launcher_env(run_id, {"RECIPE": recipe, "NUM_HEADS": "3"}))
    lines = out.stdout.splitlines()
    assert any(line.endswith("data/build_shards.py %s   # no dataset configured: building the bundled sample"
                             % " ".join(build)) for line in lines), out.stdout[-3000:]
    assert (root / "data" / "tokenizers" / tokenizer).is_file()
    assert list((root / "data" / "datasets" / dataset).glob("fineweb_train_*.bin"))
    command = next(line for line in lines if line.startswith("+ RUN_ID="))
    assert scaled in command and "GPTQ_CALIBRATION_BATCHES=8" in command and "WARMDOWN_ITERS" not in command
    started = {"RECIPE": recipe, "NUM_HEADS": "3", "MODEL_DIM": "64", "LOOP_START": "2",
               "PARALLEL_START_LAYER": "4" if recipe == "2026-04-27" else "None", "DATA_PATH": "None",
               "TOKENIZER_PATH": "None"}  # the recipe's default paths are the trainer's to resolve
    assert out.returncode == 2 and last_line(out.stdout).startswith("run.sh: FAILED (exit 2): started with " + " ".join(
        "%s=%s" % item for item in started.items()) + " ("), out.stdout[-3000:]


def test_help_names_every_recipe_and_an_unknown_recipe_is_refused(tmp_path, run_id, tgpt):
    """./run.sh --help listed 2026-03-23 and 2026-04-09 only; each recipe of the trainer's table has its own tiny
    preset and sample in run.sh."""
    root = copy_repo(tmp_path)
    shown = run_sh(root, launcher_env(run_id, {}), "--help", timeout=30).stdout
    run_sh_text = (REPO / "run.sh").read_text()
    for recipe in tgpt.RECIPES:
        assert re.search(r"(?m)^  %s  " % recipe, shown), (recipe, shown)
        assert "  %s:tiny)" % recipe in run_sh_text and recipe in SAMPLES
    out = run_sh(root, launcher_env(run_id, {"RECIPE": "2026-05-01"}), timeout=30)
    assert out.returncode == 2 and last_line(out.stdout) == (
        "run.sh: RECIPE=2026-05-01: expected 2026-03-23, 2026-04-09 or 2026-04-27 (./run.sh --help)")
    assert not (root / "logs").exists()


def test_a_resume_without_its_checkpoint_is_refused_before_anything_starts(tmp_path, run_id):
    root = copy_repo(tmp_path)
    env = launcher_env(run_id, {"RESUME": "latest"})
    out = run_sh(root, env, timeout=60)
    assert out.returncode == 2 and last_line(out.stdout) == (
        "run.sh: RESUME=latest: no checkpoint in logs/%s/checkpoints (CHECKPOINT_EVERY or CHECKPOINT_ON_SIGNAL=1 "
        "writes them)" % run_id), out.stdout
    del env["RUN_ID"]
    out = run_sh(root, env, timeout=60)
    assert out.returncode == 2 and last_line(out.stdout) == (
        "run.sh: RESUME=latest continues the run named by RUN_ID: set RUN_ID"), out.stdout
    assert not (root / "logs").exists()


def test_asking_for_the_record_preset_on_a_cpu_warns_and_adds_nothing(tmp_path, tiny_data, run_id):
    root = copy_repo(tmp_path)
    env = launcher_env(run_id, dict(PRESET="record", NUM_HEADS="3", DATA_PATH=tiny_data["env"]["DATA_PATH"],
                                    TOKENIZER_PATH=tiny_data["env"]["TOKENIZER_PATH"]))
    out = run_sh(root, env)
    assert "preset: record (PRESET=record; no usable NVIDIA GPU" in out.stdout, out.stdout[-3000:]
    assert "run.sh: WARNING: PRESET=record trains the 27M-parameter record model on the CPU" in out.stdout
    assert "MODEL_DIM=512 must be divisible by NUM_HEADS=3" in last_line(out.stdout)  # the trainer's default


# ---- item 5: the reason is run.sh's last line ----
def test_last_line_gives_the_data_error_right_after_the_trainers_error_line(tmp_path, tiny_data, run_id):
    """On the terminal nothing comes between the trainer's one-line error and run.sh's last line (torchrun's
    ChildFailedError traceback and its E/W log lines did); the console log keeps them."""
    root = copy_repo(tmp_path)
    missing = str(tmp_path / "no_such_tokenizer.model")
    env = launcher_env(run_id, dict(TINY_MODEL_ENV, DATA_PATH=tiny_data["env"]["DATA_PATH"], TOKENIZER_PATH=missing))
    out = run_sh(root, env)
    last = last_line(out.stdout)
    assert out.returncode != 0 and last.startswith("run.sh: FAILED (exit %d): " % out.returncode), out.stdout[-3000:]
    assert missing in last, out.stdout[-3000:]
    lines = out.stdout.rstrip("\n").splitlines()
    error = next(i for i, line in enumerate(lines) if line.startswith("error: "))
    assert lines[error + 1:] == [last] and not [line for line in lines if re.match(r"[EW]\d{4} ", line)], lines
    console = (root / "logs" / ("%s.console.txt" % run_id)).read_text()
    assert last_line(console) == last  # the console log ends the same way
    assert "ChildFailedError" in console and re.search(r"(?m)^E\d{4} ", console)  # torchrun's report, kept there


def test_console_filter_drops_torchruns_report_and_keeps_a_ranks_traceback():
    """The terminal's view of a job's output: torchrun's log lines and its own traceback with the failure report
    after it go; a rank's traceback (a bug's report) stays."""
    stream = "\n".join([
        "W1129 04:29:56.123000 5598 site-packages/torch/distributed/run.py:792] Setting OMP_NUM_THREADS", "step:1/9",
        "error: invalid configuration: NUM_HEADS=3", "error: invalid configuration: NUM_HEADS=3",  # rank 0, rank 1
        "Traceback (most recent call last):", '  File "/repo/train_gpt.py", line 3799, in <module>',
        "ZeroDivisionError",
        "E1129 04:29:57.000000 5598 site-packages/torch/distributed/elastic/multiprocessing/api.py:882] failed",
        "Traceback (most recent call last):", '  File "<frozen runpy>", line 198, in _run_module_as_main',
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:", "Root Cause (first observed failure):",
        "  exitcode  : 1 (pid: 6)"]) + "\n"
    out = subprocess.run([sys.executable, str(REPO / "tools" / "console_filter.py")], input=stream,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.splitlines() == [
        "step:1/9", "error: invalid configuration: NUM_HEADS=3", "Traceback (most recent call last):", '  File "/repo/train_gpt.py", line 3799, in <module>',
        "ZeroDivisionError"], out.stdout


def test_last_line_names_the_signal_that_killed_a_rank(tmp_path, tiny_data, run_id):
    """No message at all: a rank killed by SIGKILL (as the out-of-memory killer does) mid-training."""
    root = copy_repo(tmp_path)
    env = launcher_env(run_id, dict(TINY_MODEL_ENV, **ENDLESS, DATA_PATH=tiny_data["env"]["DATA_PATH"],
                                    TOKENIZER_PATH=tiny_data["env"]["TOKENIZER_PATH"]))
    output = tmp_path / "out.txt"
    proc = start_and_wait_for(root, env, output, "step:2/")
    ranks = [pid for pid in job_pids(run_id) if b"train_gpt.py" in Path("/proc/%d/cmdline" % pid).read_bytes()
             and b"torch.distributed.run" not in Path("/proc/%d/cmdline" % pid).read_bytes()]
    assert len(ranks) == 1, ranks
    os.kill(ranks[0], signal.SIGKILL)
    assert proc.wait(timeout=120) == 128 + signal.SIGKILL
    last = last_line(output.read_text())
    assert last.startswith("run.sh: FAILED (exit 137): rank 0 was killed by SIGKILL (signal 9)"), last
    assert_job_gone(run_id)


TRACEBACK_TRAINER = """
from torch.distributed.elastic.multiprocessing.errors import record


@record
def main():
    raise OSError("shard fineweb_train_000003.bin: read failed")


main()
"""


@pytest.mark.parametrize("trainer, code, reason", [
    (TRACEBACK_TRAINER, 1, "rank 0: OSError: shard fineweb_train_000003.bin: read failed"),
    ("import sys\nprint('working')\nsys.exit(3)\n", 3, "the trainer printed no reason; the output above is also in "
                                                       "logs/{run_id}.console.txt")],
    ids=["traceback-only", "silent"])
def test_last_line_without_an_error_line(tmp_path, run_id, trainer, code, reason):
    """A trainer that prints no `error:` line: the reason comes from torchrun's summary, else a pointer."""
    root = copy_repo(tmp_path, trainer=trainer)
    out = run_sh(root, launcher_env(run_id, NO_SAMPLE), timeout=120)
    assert out.returncode == code, out.stdout[-3000:]
    assert last_line(out.stdout) == "run.sh: FAILED (exit %d): %s" % (code, reason.format(run_id=run_id))


def test_first_error_line_is_the_reason_and_indented_lines_continue_it():
    lines = ["logfile:logs/x.txt", "error: invalid configuration:", "  MODEL_DIM=65 must be divisible by NUM_HEADS=4",
             "  EMA_DECAY=2.0 must be in (0, 1)", "Traceback (most recent call last):",
             "[rank1]: error: RuntimeError: peer closed the connection"]
    assert job_outcome.first_error(lines) == ("invalid configuration: MODEL_DIM=65 must be divisible by "
                                              "NUM_HEADS=4; EMA_DECAY=2.0 must be in (0, 1)")
    assert job_outcome.first_error(lines[5:]) == "RuntimeError: peer closed the connection"
    assert job_outcome.outcome(lines[:1], 0, 75, "logs/x.console.txt") == (
        0, "run.sh: done in 1:15; logs: logs/x.txt, logs/x.console.txt")
    assert job_outcome.outcome(lines[:1], 128 + 9, 5, "c.txt") == (
        137, "run.sh: FAILED (exit 137): torchrun was killed by SIGKILL (signal 9)")


# ---- item 6: signals reach the whole job ----
def test_sigterm_stops_the_whole_training_job(tmp_path, tiny_data, run_id):
    root = copy_repo(tmp_path)
    env = launcher_env(run_id, dict(TINY_MODEL_ENV, **ENDLESS, DATA_PATH=tiny_data["env"]["DATA_PATH"],
                                    TOKENIZER_PATH=tiny_data["env"]["TOKENIZER_PATH"]))
    output = tmp_path / "out.txt"
    proc = start_and_wait_for(root, env, output, "step:2/")
    assert len(job_pids(run_id)) >= 4  # run.sh, tee, torchrun, the rank
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == -signal.SIGTERM  # run.sh ends by the signal it got
    assert_job_gone(run_id)
    assert last_line(output.read_text()).startswith("run.sh: stopped by SIGTERM")


SLEEPING_TRAINER = """
import os, signal, time
if os.environ.get("IGNORE_SIGTERM") == "1":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
print("step:1/100 train_loss:7.0", flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGHUP], ids=["SIGINT", "SIGHUP"])
def test_other_stop_signals_stop_the_job(tmp_path, run_id, sig):
    root = copy_repo(tmp_path, trainer=SLEEPING_TRAINER)
    output = tmp_path / "out.txt"
    proc = start_and_wait_for(root, launcher_env(run_id, NO_SAMPLE), output, "step:1/")
    proc.send_signal(sig)
    assert proc.wait(timeout=60) == -sig
    assert_job_gone(run_id)
    assert last_line(output.read_text()).startswith("run.sh: stopped by %s" % sig.name)


def test_a_second_signal_kills_a_rank_that_ignores_sigterm(tmp_path, run_id):
    """torchrun would wait 30 s for such a rank; the user's second Ctrl-C/SIGTERM ends it at once."""
    root = copy_repo(tmp_path, trainer=SLEEPING_TRAINER)
    output = tmp_path / "out.txt"
    proc = start_and_wait_for(root, launcher_env(run_id, dict(NO_SAMPLE, IGNORE_SIGTERM="1")), output,
                              "step:1/")
    proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 30
    while "run.sh: SIGTERM: stopping the job" not in output.read_text():
        assert time.monotonic() < deadline, output.read_text()[-3000:]
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == -signal.SIGTERM
    assert_job_gone(run_id)


# ---- item 4: one interpreter for run.sh, test.sh and tools/py; only what is missing is installed ----
def fake_python(path: Path, block_file: Path, blocked: str, pip_log: Path = None) -> None:
    """An interpreter that is the real one, except that `blocked` cannot be imported while `block_file`
    exists; with `pip_log`, `-m pip ...` only appends its arguments there and deletes `block_file` (as if it
    had installed the module)."""
    site = path.parent / ("site_" + path.name)
    site.mkdir(parents=True, exist_ok=True)
    (site / "sitecustomize.py").write_text(
        "import os, sys\nif os.path.exists(%r):\n    sys.modules[%r] = None\n" % (str(block_file), blocked))
    pip = ""
    if pip_log is not None:
        pip = ('if [ "$1" = -m ] && [ "$2" = pip ]; then echo "$*" >> "%s"; rm -f "%s"; exit 0; fi\n'
               % (pip_log, block_file))
    path.write_text('#!/bin/sh\n%sPYTHONPATH="%s" exec "%s" "$@"\n' % (pip, site, sys.executable))
    path.chmod(0o755)


def test_no_shell_script_pipes_into_grep_q_under_pipefail():
    """grep -q exits at its first match; under pipefail a writer still writing then dies of SIGPIPE and the pipeline
    fails, at random (it once made a resume build the bundled sample). First the hazard itself, then the scripts."""
    hazard = "set -o pipefail; printf '%s\\n' DATA_PATH=x $(seq 100000) | grep -q '^DATA_PATH='"
    assert subprocess.run(["bash", "-c", hazard]).returncode != 0
    assert subprocess.run(["bash", "-c", hazard.replace("grep -q", "grep") + " >/dev/null"]).returncode == 0
    scripts = [REPO / "run.sh", REPO / "test.sh", REPO / ".ci" / "run"]
    piped = [f"{path.name}: {line.strip()}" for path in scripts for line in path.read_text().splitlines()
             if re.search(r"\|\s*grep\s+(-\w*q|--quiet)", line) and not line.lstrip().startswith("#")]
    assert piped == []


def test_run_sh_test_sh_and_tools_py_use_the_same_interpreter(tmp_path, run_id):
    """python3 has the trainer's modules but not pytest; ./.venv has everything: the old setup sent run.sh to
    python3 and test.sh to .venv."""
    root = copy_repo(tmp_path)
    shims = tmp_path / "shims"
    fake_python(shims / "python3", tmp_path / "block_python3", "pytest")
    (tmp_path / "block_python3").touch()
    venv_python = root / ".venv" / "bin" / "python"
    fake_python(venv_python, tmp_path / "never", "none")
    env = launcher_env(run_id, dict(NO_SAMPLE, PATH="%s:%s" % (shims, os.environ["PATH"]), MODEL_DIM="65"))
    del env["PYTHON"]
    ran = run_sh(root, env, timeout=120)
    command = next(line for line in ran.stdout.splitlines() if line.startswith("+ RUN_ID="))
    assert " %s -m torch.distributed.run " % venv_python in command, command
    tested = subprocess.run([str(root / "test.sh"), "--version"], env=env, capture_output=True, text=True,
                            timeout=120)
    assert tested.stdout.startswith("+ %s -m pytest -rs -n 2 --dist loadfile tests --version" % venv_python), \
        tested.stdout + tested.stderr
    py = subprocess.run([str(root / "tools" / "py"), "-c", "import os; print(os.environ['PYTHON'])"], env=env,
                        capture_output=True, text=True, timeout=60)
    assert (py.returncode, py.stdout.strip()) == (0, str(venv_python)), py.stderr


def test_setup_installs_only_what_the_venv_lacks(tmp_path, run_id):
    root = copy_repo(tmp_path)
    pip_log, block = tmp_path / "pip.log", tmp_path / "block_scipy"
    block.touch()
    fake_python(root / ".venv" / "bin" / "python", block, "scipy", pip_log)
    env = launcher_env(run_id, {})
    del env["PYTHON"]
    first = subprocess.run([str(root / "test.sh"), "--version"], env=env, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stdout + first.stderr
    assert pip_log.read_text().splitlines() == ["-m pip install -q scipy>=1.11"]
    assert "setup: installing into %s: scipy>=1.11" % (root / ".venv") in first.stderr
    again = subprocess.run([str(root / "tools" / "py"), "-c", "print('ok')"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert (again.returncode, again.stdout, again.stderr) == (0, "ok\n", "")  # nothing reinstalled, nothing said
    assert len(pip_log.read_text().splitlines()) == 1


def test_test_sh_installs_triton_into_the_venv_and_lists_skips(tmp_path, run_id):
    """README's test command failed on a fresh machine: only .ci/run installed Triton."""
    root = copy_repo(tmp_path)
    pip_log, block = tmp_path / "pip.log", tmp_path / "block_triton"
    block.touch()
    fake_python(root / ".venv" / "bin" / "python", block, "triton", pip_log)
    env = launcher_env(run_id, {})
    del env["PYTHON"]
    out = subprocess.run([str(root / "test.sh"), "--version"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert pip_log.read_text().splitlines() == ["-m pip install -q triton==3.7.1"]
    assert out.stdout.startswith("+ %s -m pytest -rs -n 2 --dist loadfile tests --version"
                                 % (root / ".venv" / "bin" / "python"))
    serial = subprocess.run([str(root / "test.sh"), "--version"], env=dict(env, TEST_WORKERS="0"), capture_output=True,
                            text=True, timeout=120)
    assert serial.stdout.startswith("+ %s -m pytest -rs tests --version" % (root / ".venv" / "bin" / "python"))


def test_an_explicit_python_that_lacks_requirements_is_an_error(tmp_path, run_id):
    root = copy_repo(tmp_path)
    fake_python(tmp_path / "bin" / "python", tmp_path / "block", "sentencepiece")
    (tmp_path / "block").touch()
    out = subprocess.run([str(root / "tools" / "py"), "-c", "print('ran')"], capture_output=True, text=True,
                         env=launcher_env(run_id, {"PYTHON": str(tmp_path / "bin" / "python")}), timeout=60)
    assert out.returncode == 1 and out.stdout == ""
    assert "setup: PYTHON=%s lacks: sentencepiece>=0.2" % (tmp_path / "bin" / "python") in out.stderr
    assert not (root / ".venv").exists()
