"""Multi-process behaviour on the CPU (gloo): one failing rank ends the whole job with that rank's error."""
import shutil
import subprocess
import sys
import time

import numpy as np

from tgpt_util import REPO, run_env, tiny_data  # noqa: F401 (fixture)


def test_one_rank_failing_mid_run_ends_the_job_with_its_error(tiny_data, tmp_path):
    """Rank 1 meets a corrupt second train shard after a few steps while rank 0 waits in a collective: torchrun
    must stop both (no hang until a collective timeout) and the console must carry rank 1's error and file, once."""
    good = tiny_data["root"] / "ds"
    bad = tmp_path / "bad_ds"
    shutil.copytree(good, bad)
    broken = bad / "fineweb_train_000001.bin"
    raw = bytearray(broken.read_bytes())
    raw[0:4] = np.int32(99).tobytes()
    broken.write_bytes(bytes(raw))
    env = run_env(dict(tiny_data["env"], ITERATIONS="200", TRAIN_BATCH_TOKENS="16384", VAL_BATCH_SIZE="16384",
                       VAL_LOSS_EVERY="0", TRAIN_LOG_EVERY="1", FINAL_EVAL="0",
                       FAULT_RANK="1", FAULT_DATA_PATH=str(bad)))
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               str(REPO / "tests" / "scripts" / "rank_fault_launch.py")]
    start = time.perf_counter()
    out = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - start
    text = out.stdout + out.stderr
    assert out.returncode != 0
    reason = "%s: bad magic 99, expected 20240520" % broken
    # rank 1 names its failure once; rank 0, failing only because its peer is gone, waits and is stopped by
    # torchrun before it prints anything (no `error:` line, no traceback of its lost connection)
    assert [line for line in text.splitlines() if line.startswith("error:")] == ["error: " + reason], text[-4000:]
    assert "[rank0]:" not in text and "[rank1]:" not in text
    root_cause = text[text.index("Root Cause"):]
    assert "rank      : 1" in root_cause and "traceback : " + reason in root_cause  # torchrun blames the right rank
    assert "step:3/200 train_loss" in text  # it failed mid-run, not at start-up
    assert "step:200/200" not in text
    assert elapsed < 120, elapsed
