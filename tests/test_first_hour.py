"""A user's first hour: what the trainer says to a Python without torch, to a bad TRAIN_SEQ_LEN and to a
mistyped setting (at the start and again at the end of the run, and in run.sh's last line), its CPU-thread line,
that importing it changes no environment, and tools/sample.py printing continuations of a finished run."""
import json
import os
import subprocess
import sys

import pytest

from tgpt_util import REPO, TINY_MODEL_ENV, run_env, tgpt, tiny_data, tiny_data_short_val  # noqa: F401 (fixtures)

sys.path.insert(0, str(REPO / "tools"))
import job_outcome  # noqa: E402


def test_help_with_a_python_that_lacks_torch_is_one_error_line(tmp_path):
    """README offered `python3 train_gpt.py --help`; a python3 without torch ended in a ModuleNotFoundError
    traceback."""
    blocker = ("import runpy, sys; sys.modules['torch'] = None; sys.argv = ['train_gpt.py', '--help']; "
               "runpy.run_path(%r, run_name='__main__')" % str(REPO / "train_gpt.py"))
    out = subprocess.run([sys.executable, "-c", blocker], cwd=tmp_path, env=run_env({}), capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 1 and out.stdout == "", out
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "torch" in lines[0] and "tools/py" in lines[0], lines


WAIT_CASES = [
    ({}, "PASSIVE 1000"),  # the default: a short spin, then sleep (docs/running.md, CPU threads)
    ({"OMP_WAIT_POLICY": "PASSIVE"}, "PASSIVE None"),  # a policy the user set is OpenMP's alone: no spin added
    ({"OMP_WAIT_POLICY": "ACTIVE"}, "ACTIVE None"),
    ({"GOMP_SPINCOUNT": "5"}, "None 5"),
]


@pytest.fixture(scope="module")
def openmp_wait_seen():
    """What OMP_WAIT_POLICY and GOMP_SPINCOUNT are in a Python that imported the trainer as a module ("import"),
    then, for each of WAIT_CASES (by index), after the environment was set to the case's and train_gpt.py ran as a
    script with --help (it stops before torch does any work). One interpreter runs them all, each a start-up less:
    a script's run executes the file's top level again, where the defaults are set, and reads the environment of
    that moment."""
    code = """
import json, os, runpy, sys
sys.path.insert(0, %r)
import train_gpt
names = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
seen = {"import": " ".join(str(os.environ.get(name)) for name in names)}
for index, given in enumerate(json.loads(sys.argv[1])):
    for name in names:
        os.environ.pop(name, None)
    os.environ.update(given)
    sys.argv = ["train_gpt.py", "--help"]
    try:
        runpy.run_path(%r, run_name="__main__")
    except SystemExit:
        pass
    seen[str(index)] = " ".join(str(os.environ.get(name)) for name in names)
print(json.dumps(seen))
""" % (str(REPO), str(REPO / "train_gpt.py"))
    out = subprocess.run([sys.executable, "-c", code, json.dumps([given for given, _ in WAIT_CASES])],
                         env=run_env({}), capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.splitlines()[-1])


def test_importing_the_trainer_sets_no_environment_variable(openmp_wait_seen):
    assert openmp_wait_seen["import"] == "None None"


@pytest.mark.parametrize("case", range(len(WAIT_CASES)), ids=[expected for _, expected in WAIT_CASES])
def test_the_script_sets_the_openmp_wait_defaults_unless_the_user_did(openmp_wait_seen, case):
    """Run as a script, the trainer sets its OpenMP wait before torch loads OpenMP; OMP_WAIT_POLICY or
    GOMP_SPINCOUNT set by the user leave both as they are."""
    given, expected = WAIT_CASES[case]
    assert openmp_wait_seen[str(case)] == expected, given


def test_a_bad_train_seq_len_is_blamed_and_eval_stride_is_not(tgpt):
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"TRAIN_SEQ_LEN": "-5"})
    assert info.value.errors == ["TRAIN_SEQ_LEN=-5 must be > 0"]
    with pytest.raises(tgpt.ConfigError, match="EVAL_STRIDE=4096 must be in"):  # the stride is still checked
        tgpt.Hyperparameters.from_env({"EVAL_STRIDE": "4096"})


def test_run_sh_last_line_names_the_ignored_settings():
    warning = ("WARNING unknown_env: NUM_LAYER=3 is not a setting of this script and is IGNORED (did you mean "
               "NUM_LAYERS?)")
    other = "WARNING unknown_env: MUON_BETA2=0.9 is not a setting of this script and is IGNORED"
    lines = [warning, other, "step:1/1 train_loss:1.0", warning, other, "logfile:logs/x.txt"]
    status, line = job_outcome.outcome(lines, 0, 75, "logs/x.console.txt")
    assert status == 0 and line == ("run.sh: done in 1:15; logs: logs/x.txt, logs/x.console.txt; IGNORED (not "
                                    "settings): NUM_LAYER=3 (did you mean NUM_LAYERS?), MUON_BETA2=0.9")
    status, line = job_outcome.outcome(lines + ["error: boom"], 1, 5, "c")
    assert line.endswith("boom; IGNORED (not settings): NUM_LAYER=3 (did you mean NUM_LAYERS?), MUON_BETA2=0.9")
    assert job_outcome.outcome(["step:1/1"], 0, 5, "c")[1] == "run.sh: done in 0:05; logs: c"


def test_a_tiny_run_repeats_the_ignored_warning_at_the_end_and_sample_prints_its_continuations(tiny_data_short_val,
                                                                                              tmp_path):
    env = dict(TINY_MODEL_ENV, **tiny_data_short_val["env"], ITERATIONS="3", TRAIN_LOG_EVERY="1", VAL_LOSS_EVERY="0",
               TTT_ENABLED="0", EVAL_STRIDE="32", RUN_ID="hour", NUM_LAYER="3")
    out = subprocess.run([sys.executable, str(REPO / "train_gpt.py")], cwd=tmp_path, env=run_env(env),
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    lines = out.stdout.splitlines()
    warning = ("WARNING unknown_env: NUM_LAYER=3 is not a setting of this script and is IGNORED (did you mean "
               "NUM_LAYERS?)")
    where = [i for i, line in enumerate(lines) if line == warning]
    last_step = max(i for i, line in enumerate(lines) if line.startswith("step:3/3"))
    assert len(where) == 2 and where[0] < last_step < where[1] and lines[-1].startswith("outputs: "), lines[-8:]
    assert "cpu_threads:1 omp_wait_policy:PASSIVE gomp_spincount:1000" in lines  # set before OpenMP loaded
    for extra in ([], ["--raw"]):
        sampled = subprocess.run([sys.executable, str(REPO / "tools" / "sample.py"), "logs/hour", "--samples", "2",
                                  "--tokens", "8", "--prompt", "The city"] + extra, cwd=tmp_path, env=run_env({}),
                                 capture_output=True, text=True, timeout=300)
        assert sampled.returncode == 0, sampled.stderr[-3000:]
        blocks = sampled.stdout.split("--- sample ")
        assert sampled.stdout.startswith("model: logs/hour/final_model") and len(blocks) == 3, sampled.stdout
        assert all(block.split("\n", 1)[1].startswith("The city") for block in blocks[1:]), sampled.stdout
    missing = subprocess.run([sys.executable, str(REPO / "tools" / "sample.py"), "logs/nothing"], cwd=tmp_path,
                             env=run_env({}), capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and missing.stderr.startswith("error: logs/nothing.txt: no such log")
