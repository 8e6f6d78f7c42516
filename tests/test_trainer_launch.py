"""train_gpt.py as a user starts it (trainer side): --help and unknown arguments, the reason of a failure
as the last line (with and without torchrun, one and two gloo ranks), Ctrl-C, a RUN_ID whose log exists, the
tokenizer identity check against the dataset's manifest.json, and a Python without brotli."""
import dataclasses
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from tgpt_util import REPO, TINY_MODEL_ENV, run_env, tgpt, tiny_data, tiny_data_short_val  # noqa: F401 (fixtures)

sys.path.insert(0, str(REPO))
from data.manifest import expected_tokenizer_sha256  # noqa: E402

SCRIPT = str(REPO / "train_gpt.py")
QUICK = {"ITERATIONS": "1", "FINAL_EVAL": "0"}  # start-up checks only need a run that ends right after them


def launch(env: dict, cwd, *args: str, nproc: int = 0, timeout: int = 300) -> subprocess.CompletedProcess:
    """train_gpt.py directly (nproc 0) or under torchrun with `nproc` ranks."""
    command = [sys.executable, SCRIPT, *args]
    if nproc:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % nproc,
                   SCRIPT, *args]
    return subprocess.run(command, cwd=cwd, env=run_env(env), capture_output=True, text=True, timeout=timeout)


def content_lines(text: str) -> list:
    """The lines that say something: no blank lines and no torchrun separators (==== / ----)."""
    return [line for line in text.splitlines() if line.strip() and not re.fullmatch(r"[=-]+", line.strip())]


# ---- the command line ----
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_setting_with_type_default_and_help_and_starts_nothing(tgpt, tmp_path, flag):
    out = launch({}, tmp_path, flag, timeout=120)
    assert out.returncode == 0 and out.stderr == "", out.stderr
    assert os.listdir(tmp_path) == [] and "logfile:" not in out.stdout  # no log, no run
    for field in dataclasses.fields(tgpt.Hyperparameters):
        default = field.default if field.default != "" else '""'
        recipe = "".join(re.escape(" [%s: %s]" % (name, table[field.name])) for name, table in tgpt.RECIPES.items()
                         if table.get(field.name, field.default) != field.default)  # every recipe that differs
        pattern = r"^  %s +%s +(\S.*) \[default: %s\]%s$" % (field.name.upper(), field.type.__name__,
                                                               re.escape(str(default)), recipe)
        assert re.search(pattern, out.stdout, re.MULTILINE), "no help line for %s" % field.name.upper()
    assert re.search(r"^  MLP_MULT +float .* \[default: 3\.0\] \[2026-04-09: 4\.0\] \[2026-04-27: 4\.0\]$", out.stdout,
                     re.MULTILINE)
    # the help comes from each field's own line: the comment of COMPRESSOR's line, under its group's heading
    assert re.search(r"^End of run: .*:\n(  .*\n)*  COMPRESSOR +str +artifact: pergroup \(rANS per role and shape, "
                     r"SPEC_0427 §9\), brotli, lzma \[default: brotli\] \[2026-04-09: pergroup\] "
                     r"\[2026-04-27: pergroup\]$",
                     out.stdout, re.MULTILINE), out.stdout


def test_an_unknown_argument_is_named_with_a_pointer_to_help(tmp_path):
    out = launch({}, tmp_path, "--iterations", "10", timeout=120)
    assert out.returncode == 2 and out.stdout == "" and os.listdir(tmp_path) == []
    assert out.stderr.splitlines() == ["error: unexpected argument '--iterations': settings are environment variables "
                                       "(NUM_LAYERS=9 python train_gpt.py); python train_gpt.py --help lists them"]


# ---- the reason is the last line, once ----
FAILURES = {  # a refused configuration (exit 2) and a data error found after the log is opened (exit 1)
    "config": ({"NUM_HEADS": "5"}, 2, "invalid configuration: MODEL_DIM=64 must be divisible by NUM_HEADS=5"),
    "data": ({"TOKENIZER_PATH": "/no/such/tokenizer.model"}, 1,
             "TOKENIZER_PATH=/no/such/tokenizer.model: no such file (build data first: see README)")}


# torchrun with 2 ranks: what holds for 1 (run.sh's launch on a CPU, whose tests in test_run_sh.py end on both
# failures) holds for rank 0 there, and the second rank must say nothing
@pytest.mark.parametrize("nproc", [0, 2], ids=["python", "torchrun-2"])
@pytest.mark.parametrize("failure", sorted(FAILURES))
def test_a_named_failure_ends_with_its_reason_once(tiny_data, tmp_path, failure, nproc):
    """Direct: the last line of stderr is `error: <reason>`. torchrun: the reason is also the root cause it shows
    (no traceback there), the last line of the job's stderr; a second rank, stopped by torchrun, says nothing."""
    extra, status, reason = FAILURES[failure]
    out = launch(dict(tiny_data["env"], **extra), tmp_path, nproc=nproc)
    lines = content_lines(out.stdout + out.stderr)
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith("error: " + reason), lines[-30:]
    assert not re.search(r"^\[rank\d\]:", out.stderr, re.MULTILINE), out.stderr  # no rank's uncaught exception
    if nproc == 0:
        assert "Traceback" not in out.stderr
        assert out.returncode == status and content_lines(out.stderr)[-1] == errors[0]
        return
    assert out.returncode != 0
    root_cause = out.stderr[out.stderr.index("Root Cause (first observed failure)"):]
    assert "rank      : 0 (local_rank: 0)" in root_cause and "exitcode  : %d" % status in root_cause
    assert content_lines(out.stderr)[-1] == "  traceback : " + errors[0][len("error: "):]


def test_ctrl_c_on_a_direct_run_exits_130_with_one_line(tiny_data, tmp_path):
    env = run_env(dict(tiny_data["env"], ITERATIONS="100000", VAL_LOSS_EVERY="0", TRAIN_LOG_EVERY="1",
                       RUN_ID="interrupted"))
    # SIGINT as a terminal delivers it, also when this test runs where SIGINT is ignored (a background job)
    proc = subprocess.Popen([sys.executable, SCRIPT], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        for line in proc.stdout:
            if line.startswith("step:2/"):
                break
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=60)  # the loader thread stopped too: the process is gone
    finally:
        proc.kill()
    # the log's last line says how and when: the signal, the UTC time and the last step
    assert proc.returncode == 130 and re.fullmatch(r"stopped: SIGINT at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d UTC, "
                                                   r"step:\d+/100000 train_time:\d+ms; no checkpoint "
                                                   r"\(CHECKPOINT_ON_SIGNAL=1 saves one\)\n", err), err
    assert (tmp_path / "logs" / "interrupted.txt").read_text().endswith("\n" + err)


def test_a_run_id_whose_log_or_outputs_exist_is_refused(tgpt, tiny_data, tmp_path):
    dist_info = tgpt.DistInfo(0, 1, torch.device("cpu"))
    logger = tgpt.Logger(dist_info, str(tmp_path / "logs"), "taken")
    logger.log("the first run")
    logger.close()
    (tmp_path / "logs" / "outputs_left").mkdir()
    for run_id, existing in (("taken", "taken.txt"), ("outputs_left", "outputs_left")):
        with pytest.raises(tgpt.ConfigError, match="RUN_ID=%s: %s already exists" % (
                run_id, re.escape(str(tmp_path / "logs" / existing)))):
            tgpt.Logger(dist_info, str(tmp_path / "logs"), run_id)
    assert (tmp_path / "logs" / "taken.txt").read_text() == "the first run\n"
    assert not (tmp_path / "logs" / "outputs_left.txt").exists()
    out = launch(dict(tiny_data["env"], RUN_ID="taken"), tmp_path)  # the trainer: exit 2, the reason last
    assert out.returncode == 2 and out.stdout == "" and out.stderr.splitlines()[-1] == (
        "error: invalid configuration: RUN_ID=taken: logs/taken.txt already exists (an earlier run's): choose "
        "another RUN_ID or move it away")
    assert (tmp_path / "logs" / "taken.txt").read_text() == "the first run\n"


# ---- the tokenizer is the dataset's ----
def dataset_with_manifest(tiny_data, tmp_path, sha256) -> str:
    """A copy of the tiny dataset whose manifest.json (data/manifest.py's shape) names a tokenizer of `sha256`
    (None: no manifest)."""
    folder = tmp_path / "ds"
    shutil.copytree(tiny_data["env"]["DATA_PATH"], folder)
    if sha256 is not None:
        manifest = {"datasets": [{"name": "ds", "tokenizer_name": "sp_bpe_1024"}],
                    "tokenizers": [{"name": "sp_bpe_1024", "sha256": sha256, "vocab_size": 1024}]}
        (folder / "manifest.json").write_text(json.dumps(manifest))
    return str(folder)


def test_a_tokenizer_that_is_not_the_datasets_is_refused_unless_overridden(tiny_data, tmp_path):
    tokenizer = tiny_data["env"]["TOKENIZER_PATH"]
    data_path = dataset_with_manifest(tiny_data, tmp_path, "ab" * 32)  # the shards of another tokenizer
    env = dict(tiny_data["env"], **QUICK, DATA_PATH=data_path, RUN_ID="mismatch")
    out = launch(env, tmp_path)
    reason = content_lines(out.stderr)[-1]
    assert out.returncode == 1 and reason.startswith("error: TOKENIZER_PATH=%s (sha256 " % tokenizer), out.stderr
    assert "is not the tokenizer 'sp_bpe_1024' of %s/manifest.json (sha256 abababab" % data_path in reason
    assert reason.endswith("ALLOW_TOKENIZER_MISMATCH=1 runs anyway") and "step:" not in out.stdout
    out = launch(dict(env, ALLOW_TOKENIZER_MISMATCH="1", RUN_ID="overridden"), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    warning = [line for line in out.stdout.splitlines() if line.startswith("WARNING tokenizer_identity:")]
    assert len(warning) == 1 and "running anyway (ALLOW_TOKENIZER_MISMATCH=1)" in warning[0]
    assert warning[0] in (tmp_path / "logs" / "overridden.txt").read_text()


def test_the_datasets_tokenizer_passes_and_no_manifest_is_a_warning(tiny_data, tmp_path):
    tokenizer = tiny_data["env"]["TOKENIZER_PATH"]
    with open(tokenizer, "rb") as handle:
        sha256 = hashlib.sha256(handle.read()).hexdigest()
    (tmp_path / "ok").mkdir()
    env = dict(tiny_data["env"], **QUICK, DATA_PATH=dataset_with_manifest(tiny_data, tmp_path / "ok", sha256))
    out = launch(dict(env, RUN_ID="same"), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "tokenizer_identity: sha256 %s... is the tokenizer 'sp_bpe_1024' of " % sha256[:16] in out.stdout
    assert "WARNING tokenizer_identity" not in out.stdout
    out = launch(dict(env, DATA_PATH=tiny_data["env"]["DATA_PATH"], RUN_ID="unknown"), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert ("WARNING tokenizer_identity: not checked: %s/manifest.json does not exist, so nothing says "
            "TOKENIZER_PATH=%s made DATA_PATH's shards" % (tiny_data["env"]["DATA_PATH"], tokenizer)) in out.stdout


def test_the_trainer_reads_a_manifest_as_data_manifest_does(tgpt, tmp_path):
    """The trainer mirrors data/manifest.py (it must not import the data tools): same answer on every shape."""
    good = {"datasets": [{"tokenizer_name": "t"}], "tokenizers": [{"name": "t", "sha256": "cd" * 32}]}
    cases = [good, {"datasets": [{"tokenizer_name": "t"}], "tokenizers": [{"name": "u", "sha256": "cd" * 32}]},
             {"datasets": [{"tokenizer_name": "t"}], "tokenizers": [{"name": "t"}]}, {"datasets": []}, [1], "{bad"]
    for index, manifest in enumerate(cases + [None]):
        folder = tmp_path / str(index)
        folder.mkdir()
        if manifest is not None:
            (folder / "manifest.json").write_text(manifest if isinstance(manifest, str) else json.dumps(manifest))
        assert tgpt.manifest_tokenizer_sha256(str(folder))[0] == expected_tokenizer_sha256(folder)[0], manifest
    assert tgpt.manifest_tokenizer_sha256(str(tmp_path / "0"))[0] == "cd" * 32


# ---- brotli ----
def test_without_brotli_the_default_is_refused_at_start_up_and_lzma_runs(tgpt, tiny_data_short_val, tmp_path):
    blocker = tmp_path / "no_brotli"
    blocker.mkdir()
    (blocker / "brotli.py").write_text("raise ModuleNotFoundError(\"No module named 'brotli'\", name='brotli')\n")
    env = dict(tiny_data_short_val["env"], PYTHONPATH=str(blocker), ITERATIONS="2", RUN_ID="lzma_only",
               EVAL_STRIDE="32", TTT_ENABLED="0")
    out = launch(env, tmp_path)
    assert out.returncode == 2 and out.stdout == "" and not (tmp_path / "logs").exists()
    assert out.stderr.splitlines() == ["error: invalid configuration: COMPRESSOR=brotli needs the brotli module, which "
                                       "this Python (%s) lacks: pip install brotli, or set COMPRESSOR=lzma"
                                       % sys.executable]
    out = launch(dict(env, COMPRESSOR="lzma"), tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    readable = (REPO / "train_gpt.py").read_text(encoding="utf-8")
    stripped = len(tgpt.strip_source(readable).encode("utf-8"))  # the counted source: no comments, same lines
    assert "code_bytes:%d code_bytes_readable:%d " % (stripped, stripped) in out.stdout  # no packer without brotli
    assert " code_bytes_unstripped:%d\n" % len(readable.encode("utf-8")) in out.stdout
    assert "WARNING code_bytes: without the brotli module the packed file cannot be made" in out.stdout
    assert re.search(r"^Serialized model int6\+lzma: \d+ bytes$", out.stdout, re.MULTILINE)
    artifact = tmp_path / "logs" / "lzma_only" / "final_model.int6.ptz"
    assert artifact.read_bytes().startswith(b"\xfd7zXZ\x00") and "final_int6_roundtrip_exact" in out.stdout
