"""Checkpoint and exact resume: N steps straight vs N/2, stop, resume, N/2 (and a SIGTERM mid-run) give
bit-identical weights, optimizer states, EMA, loader positions and RNG states, for each loader, one and two gloo
ranks and each way of stopping; a missing file, a corrupted shard, other settings and another world size are named
errors."""
import json
import re
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest
import torch

from tgpt_util import REPO, run_env, tgpt, tiny_data  # noqa: F401 (fixtures)

SCRIPT = str(REPO / "train_gpt.py")
STEPS = 8


def command(nproc: int) -> list:
    return [sys.executable, SCRIPT] if nproc == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % nproc, SCRIPT]


def trainer_env(tiny_data, loader: str, **extra) -> dict:
    documents = dict(ROPE_NTK="0") if loader == "documents" else {}  # packed rows: no NTK rescale (validate)
    return run_env(dict(dict(tiny_data["env"], RUN_ID="ck", ITERATIONS=str(STEPS), VAL_LOSS_EVERY="0",
                             FINAL_EVAL="0", TRAIN_LOG_EVERY="1", TRAIN_LOADER=loader, **documents), **extra))


def train(cwd, env: dict, nproc: int) -> subprocess.CompletedProcess:
    cwd.mkdir(exist_ok=True)
    out = subprocess.run(command(nproc), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def stop_by_sigterm(cwd, env: dict, nproc: int, after_line: str) -> subprocess.Popen:
    """The run, sent SIGTERM once it printed `after_line` (torchrun passes it to every rank)."""
    cwd.mkdir(exist_ok=True)
    proc = subprocess.Popen(command(nproc), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        for line in proc.stdout:
            if line.startswith(after_line):
                break
        proc.send_signal(signal.SIGTERM)
        proc.stdout_rest, proc.stderr_text = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc


def same(a, b, where: str = "") -> None:
    """Exact equality of nested checkpoint contents (tensors bit for bit, NumPy arrays, RNG tuples)."""
    assert type(a) is type(b), where
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), where
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert list(a) == list(b), where
        for key in a:
            same(a[key], b[key], "%s/%s" % (where, key))
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for index, (x, y) in enumerate(zip(a, b)):
            same(x, y, "%s[%d]" % (where, index))
    else:
        assert a == b, where


def assert_same_checkpoint(folder_a, folder_b, nproc: int) -> None:
    for name in ["model.pt"] + ["rank_%d.pt" % rank for rank in range(nproc)]:
        same(torch.load(folder_a / name, weights_only=False), torch.load(folder_b / name, weights_only=False), name)
    manifests = [json.loads((folder / "manifest.json").read_text()) for folder in (folder_a, folder_b)]
    configs = [{k: v for k, v in manifest["config"].items() if k not in ("resume", "checkpoint_every",
                                                                          "checkpoint_on_signal")}
               for manifest in manifests]
    assert manifests[0]["step"] == manifests[1]["step"] == STEPS and configs[0] == configs[1]


EXTRA = dict(TRAIN_BATCH_TOKENS="2048", SEED="7")
HALF = str(STEPS // 2)


@pytest.fixture(scope="module")
def straight(tiny_data, tmp_path_factory):
    """straight(loader, nproc): the folder of a run of STEPS steps with checkpoints at STEPS/2 and STEPS (made once)."""
    made = {}

    def make(loader: str, nproc: int):
        if (loader, nproc) not in made:
            root = tmp_path_factory.mktemp("straight_%s_%d" % (loader, nproc))
            train(root, trainer_env(tiny_data, loader, CHECKPOINT_EVERY=HALF, **EXTRA), nproc)
            made[loader, nproc] = root
        return made[loader, nproc]
    return make


# Three axes, each value in a case: the loader; 1 or 2 gloo ranks; how the run stopped: a copy of the straight run's
# half-way checkpoint (the run went on; the copy continues as a stopped one would), or SIGTERM mid-run, then
# RESUME=latest. SIGTERM at both world sizes (at 2, torchrun passes it to each rank), a copy at 1 rank. Each case costs
# a straight run and one or two more, each mostly start-up, so not every pair of values is a case. The one-rank
# shuffled straight run is also saved_run's, for the tests below.
@pytest.mark.parametrize("loader, nproc, how", [("shuffled", 1, "copy"), ("sequential", 2, "sigterm"),
                                                ("documents", 1, "sigterm")])
def test_stopped_and_resumed_runs_end_bit_identical_to_a_straight_run(tiny_data, straight, tmp_path, loader, nproc,
                                                                      how):
    reference = straight(loader, nproc) / "logs" / "ck" / "checkpoints"
    assert sorted(p.name for p in reference.iterdir()) == ["step_" + HALF, "step_%d" % STEPS]
    run = tmp_path / "run"
    if how == "copy":
        shutil.copytree(straight(loader, nproc), run)
        shutil.rmtree(run / "logs" / "ck" / "checkpoints" / ("step_%d" % STEPS))
        out = train(run, trainer_env(tiny_data, loader, CHECKPOINT_EVERY=HALF, RESUME=str(
            run / "logs" / "ck" / "checkpoints" / ("step_" + HALF)), **EXTRA), nproc)
        assert "resume: step:%s/%d" % (HALF, STEPS) in out.stdout
        assert "step:%d/%d train_loss" % (STEPS // 2 + 1, STEPS) in out.stdout and "\nstep:1/" not in out.stdout
    else:
        env = trainer_env(tiny_data, loader, CHECKPOINT_ON_SIGNAL="1", CHECKPOINT_EVERY=str(STEPS), **EXTRA)
        stopped = stop_by_sigterm(run, env, nproc, "step:2/%d" % STEPS)
        log = (run / "logs" / "ck.txt").read_text()
        assert stopped.returncode != 0 and "checkpoint: step:" in log, stopped.stderr_text[-3000:]
        assert log.splitlines()[-1].startswith("stopped: SIGTERM at ") and "; checkpoint logs/ck/checkpoints/step_" \
            in log.splitlines()[-1]
        step = int(re.search(r"^checkpoint: step:(\d+)/", log, re.MULTILINE).group(1))
        assert 2 <= step < STEPS and "step:%d/%d train_loss" % (step + 1, STEPS) not in log
        if nproc == 1:
            assert stopped.returncode == 128 + signal.SIGTERM and stopped.stderr_text.startswith("stopped: SIGTERM")
        out = train(run, dict(env, RESUME="latest"), nproc)
        assert "resume: step:%d/%d" % (step, STEPS) in out.stdout
        log = (run / "logs" / "ck.txt").read_text()
        assert len(re.findall(r"^code_sha256:", log, re.MULTILINE)) == 2  # one log, appended to
        assert len(re.findall(r"^resume: step:", log, re.MULTILINE)) == 1
    assert_same_checkpoint(reference / ("step_%d" % STEPS), run / "logs" / "ck" / "checkpoints" / ("step_%d" % STEPS),
                           nproc)


def test_sigterm_without_checkpointing_ends_the_log_with_a_stopped_line(tiny_data, tmp_path):
    env = trainer_env(tiny_data, "sequential", ITERATIONS="100000")
    stopped = stop_by_sigterm(tmp_path, env, 1, "step:2/")
    assert stopped.returncode == 128 + signal.SIGTERM
    last = (tmp_path / "logs" / "ck.txt").read_text().splitlines()[-1]
    assert last.startswith("stopped: SIGTERM at ") and "step:" in last and "no checkpoint (CHECKPOINT_ON_SIGNAL=1" \
        in last, last
    assert stopped.stderr_text == last + "\n" and not (tmp_path / "logs" / "ck" / "checkpoints").exists()


@pytest.fixture()
def saved_run(tiny_data, straight):
    """The half-way checkpoint of the one-rank shuffled run, the env that made it and the run's folder."""
    root = straight("shuffled", 1)
    env = trainer_env(tiny_data, "shuffled", CHECKPOINT_EVERY=HALF, **EXTRA)
    return root / "logs" / "ck" / "checkpoints" / ("step_" + HALF), env, root


def h_of(tgpt, env: dict, **changes):
    return tgpt.Hyperparameters.from_env({k: v for k, v in dict(env, **changes).items() if k.isupper()})


def test_a_resume_with_other_settings_or_world_size_is_refused_naming_them(tgpt, saved_run):
    folder, env, _ = saved_run
    h, checkpoint = tgpt.resolve_resume(h_of(tgpt, env, RESUME=str(folder), TRAIN_LOG_EVERY="5",
                                             TRAIN_PREFETCH="0"), {"RESUME": str(folder)}, 1)
    assert h.run_id == "ck" and checkpoint["step"] == STEPS // 2 and checkpoint["folder"] == str(folder)
    with pytest.raises(tgpt.CheckpointError, match=r"differ .* in SEED=5 \(checkpoint: 7\), MATRIX_LR=0.03 "
                                                   r"\(checkpoint: 0.025\): a resume must train the same way"):
        tgpt.resolve_resume(h_of(tgpt, env, RESUME=str(folder), MATRIX_LR="0.03", SEED="5"), {}, 1)
    with pytest.raises(tgpt.CheckpointError, match="written by 1 ranks, this launch has WORLD_SIZE=2"):
        tgpt.resolve_resume(h_of(tgpt, env, RESUME=str(folder)), {}, 2)
    with pytest.raises(tgpt.CheckpointError, match="is run ck's checkpoint, not RUN_ID=other's"):
        tgpt.resolve_resume(h_of(tgpt, env, RESUME=str(folder), RUN_ID="other"), {"RUN_ID": "other"}, 1)
    with pytest.raises(tgpt.CheckpointError, match=r"RESUME=latest: no checkpoint in logs/nope/checkpoints"):
        tgpt.resolve_resume(h_of(tgpt, env, RESUME="latest", RUN_ID="nope"), {"RUN_ID": "nope"}, 1)
    with pytest.raises(tgpt.CheckpointError, match="not a complete checkpoint folder"):
        tgpt.resolve_resume(h_of(tgpt, env, RESUME=str(folder.parent)), {}, 1)


@pytest.mark.parametrize("damage", ["missing", "truncated", "corrupted"])
def test_a_damaged_checkpoint_file_is_a_named_error(tgpt, saved_run, tmp_path, damage):
    folder, env, _ = saved_run
    copy = tmp_path / ("step_" + HALF)
    shutil.copytree(folder, copy)
    shard = copy / "rank_0.pt"
    raw = bytearray(shard.read_bytes())
    if damage == "missing":
        shard.unlink()
    elif damage == "truncated":
        shard.write_bytes(raw[:len(raw) // 2])
    else:
        raw[len(raw) // 2] ^= 1
        shard.write_bytes(bytes(raw))
    h, checkpoint = tgpt.resolve_resume(h_of(tgpt, env, RESUME=str(copy)), {}, 1)
    dist_info = tgpt.DistInfo(0, 1, torch.device("cpu"))
    model = tgpt.build_model(h, dist_info.device)
    optimizers = tgpt.Optimizers(h, model, dist_info)
    averages = tgpt.WeightAverages(h, model)
    reason = "No such file or directory" if damage == "missing" else "sha256 is not manifest.json's: truncated"
    with pytest.raises(tgpt.CheckpointError, match="checkpoint file %s.*%s" % (shard, reason)):
        tgpt.load_checkpoint(dist_info, checkpoint, model, optimizers, averages)


def test_a_corrupted_checkpoint_stops_the_launch_with_one_error_line(saved_run, tmp_path):
    folder, env, root = saved_run
    shutil.copytree(root, tmp_path / "run")
    shutil.rmtree(tmp_path / "run" / "logs" / "ck" / "checkpoints" / ("step_%d" % STEPS))
    shard = tmp_path / "run" / "logs" / "ck" / "checkpoints" / ("step_" + HALF) / "model.pt"
    shard.write_bytes(shard.read_bytes()[:-10])
    out = subprocess.run(command(1), cwd=tmp_path / "run", env=dict(env, RESUME="latest"),
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1 and out.stderr.splitlines()[-1] == (
        "error: checkpoint file logs/ck/checkpoints/step_4/model.pt (%d bytes): its sha256 is not manifest.json's: "
        "truncated or corrupted" % shard.stat().st_size), out.stderr[-2000:]
