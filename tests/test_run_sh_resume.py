"""A run stopped with Ctrl-C and continued through run.sh (`RUN_ID=<id> RESUME=latest ./run.sh`): the stop is logged as
the SIGINT it was, the terminal shows no torchrun traceback, the resume reuses the settings of the run that wrote the
checkpoint (none are given again), a fresh run over the run's logs is still refused, and the log of the run in two
slices makes a record folder."""
import shutil
import signal
import subprocess
import sys

from tgpt_util import REPO, TINY_MODEL_ENV, run_env, tiny_data, tiny_data_short_val  # noqa: F401 (fixtures)
from test_run_sh import copy_repo, last_line, launcher_env, run_id, run_sh, start_and_wait_for  # noqa: F401


def test_ctrl_c_then_resume_latest_through_run_sh_finishes_the_run_and_makes_a_record(tmp_path, tiny_data_short_val,
                                                                                        run_id):
    root = copy_repo(tmp_path)
    (root / "records").mkdir()
    for source in (REPO / "records").glob("*.py"):
        shutil.copy(source, root / "records" / source.name)
    data = tiny_data_short_val["env"]  # a few val documents: the end-of-run evals only have to run
    first = dict(TINY_MODEL_ENV, DATA_PATH=data["DATA_PATH"], TOKENIZER_PATH=data["TOKENIZER_PATH"], ITERATIONS="8",
                 TRAIN_LOG_EVERY="1", VAL_LOSS_EVERY="0", TTT_ENABLED="0", CHECKPOINT_ON_SIGNAL="1")
    output = tmp_path / "first.txt"
    proc = start_and_wait_for(root, launcher_env(run_id, first), output, "step:2/")
    proc.send_signal(signal.SIGINT)  # Ctrl-C at a terminal
    assert proc.wait(timeout=120) == -signal.SIGINT
    log = root / "logs" / ("%s.txt" % run_id)
    stopped = last_line(log.read_text())
    assert stopped.startswith("stopped: SIGINT at ") and "; checkpoint logs/%s/checkpoints/step_" % run_id in stopped
    shown = output.read_text()
    assert stopped in shown and "Traceback" not in shown and "SignalException" not in shown, shown[-3000:]
    assert "SignalException" in (root / "logs" / ("%s.console.txt" % run_id)).read_text()  # the full output is kept

    fresh = run_sh(root, launcher_env(run_id, {}), timeout=60)
    assert fresh.returncode == 2 and "RUN_ID=%s: logs/%s.txt already exists" % (run_id, run_id) in fresh.stdout
    assert "RESUME=latest" in last_line(fresh.stdout)

    resumed = run_sh(root, launcher_env(run_id, {"RESUME": "latest"}))  # nothing of `first` given again
    assert resumed.returncode == 0 and last_line(resumed.stdout).startswith("run.sh: done in "), resumed.stdout[-3000:]
    assert resumed.stdout.startswith("preset: resume ("), resumed.stdout[:300]
    text = log.read_text()
    step = int(stopped.split("step:")[1].split("/")[0])
    assert "\nresume: step:%d/8 " % step in text and "\nstep:8/8 " in text and "\nfinal_int6_roundtrip_exact " in text

    made = subprocess.run([sys.executable, "-m", "records.make", "make", "--track", "track_non_record_16mb", "--name",
                           "Resumed", "--author", "a", "--github-id", "g", "--date", "2026-11-29",
                           "--skip-import-check", str(log)], cwd=root, env=run_env({}), capture_output=True,
                          text=True, timeout=600)
    assert made.returncode == 0, made.stdout + made.stderr
    readme = (root / "records" / "track_non_record_16mb" / "2026-11-29_Resumed" / "README.md").read_text()
    assert "one run in 2 slices:" in readme and "slice 2: resumed from logs/%s/checkpoints/step_%d" % (run_id, step) \
        in readme
