"""Each later recipe's tiny preset end to end through run.sh on the CPU, on its bundled sample built the way run.sh
builds it: what the recipe is made of shows in the log. For a test's minute, fewer val documents, and SHORTER: fewer
and smaller steps (one thread each here). 2026-03-23's tiny preset runs end to end in tests/test_docs.py (the
README's records example)."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tgpt_util import REPO, run_env, tgpt  # noqa: F401 (fixture)
from test_run_sh import SAMPLES, copy_repo_with_data_tools, launcher_env, last_line, run_id, run_sh  # noqa: F401

# 2026-04-27 loops from 35% of the steps: steps 2-3; its preset's batch already is 4096 tokens
SHORTER = {"ITERATIONS": "3", "WARMUP_STEPS": "1", "TRAIN_BATCH_TOKENS": "4096"}


def build_sample(root: Path, recipe: str, val_docs: int) -> None:
    build, _, _ = SAMPLES[recipe]
    out = subprocess.run([sys.executable, "data/build_shards.py", *build, "--val-docs", str(val_docs),
                          "--no-progress", "--workers", "1"], cwd=root, env=run_env({}), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


def run_tiny(tmp_path: Path, run_id: str, recipe: str, val_docs: int):
    root = copy_repo_with_data_tools(tmp_path)
    build_sample(root, recipe, val_docs)
    out = run_sh(root, launcher_env(run_id, dict(SHORTER, RECIPE=recipe)), timeout=600)
    assert out.returncode == 0 and last_line(out.stdout).startswith("run.sh: done in "), out.stdout[-4000:]
    assert out.stdout.startswith("preset: tiny (no usable NVIDIA GPU"), out.stdout[:500]
    log = (root / "logs" / ("%s.txt" % run_id)).read_text(encoding="utf-8")
    config = dict(line[len("config:"):].split("=", 1) for line in log.splitlines() if line.startswith("config:"))
    assert config["recipe"] == recipe and config["iterations"] == SHORTER["ITERATIONS"]
    return root, log, config


def test_the_2026_04_09_tiny_preset_runs_end_to_end(tmp_path, run_id):
    """SPEC_0409: depth recurrence switched on during training, parallel residuals, GPTQ, the artifact in the
    recipe's container and the score-first TTT."""
    _, log, config = run_tiny(tmp_path, run_id, "2026-04-09", val_docs=8)
    assert int(config["num_loops"]) > 0 and re.search(r"(?m)^layer_loop:enabled step:\d+ ", log)
    assert 0 <= int(config["parallel_residual_start"]) < int(config["num_layers"])
    assert config["quantizer"] == "gptq" and re.search(r"(?m)^GPTQ:collected \d+ Hessians", log)
    assert "Serialized model int6+%s:" % config["compressor"] in log
    assert re.search(r"(?m)^legal_ttt_exact val_loss:\S+ val_bpb:\S+$", log)


def test_the_2026_04_27_tiny_preset_runs_end_to_end(tmp_path, run_id, tgpt):
    """What the recipe is made of: the documents loader with its CPU attention path, the gates, two lanes, LQER,
    the pergroup compressor and the phased LoRA TTT, on CaseOps data built from the bundled sample
    (data/build_shards.py --caseops); 24 val documents make two TTT batches of the preset, enough for its global
    SGD phases."""
    root, log, config = run_tiny(tmp_path, run_id, "2026-04-27", val_docs=24)
    assert re.search(r"(?m)^train_data loader:documents ", log)
    assert re.search(r"(?m)^doc_attention_backend:sdpa ", log)  # a CPU has no varlen kernel: a masked SDPA
    assert config["smear_gate_enabled"] == config["sparse_attn_gate_enabled"] == "True"
    assert 0 <= int(config["parallel_start_layer"]) < int(config["num_layers"])
    assert "Serialized model int6+pergroup:" in log and re.search(r"(?m)^val_bytes:\d+$", log)  # the byte sidecar
    assert re.search(r"(?m)^ttt_phased:phase after_batches:\d+ docs:\d+ ", log)
    assert re.search(r"(?m)^legal_ttt_exact val_loss:\S+ val_bpb:\S+$", log)
    tensors, _ = tgpt.deserialize_artifact((root / "logs" / run_id / "final_model.int6.ptz").read_bytes())
    assert int(config["lqer_rank"]) > 0 and [name for name in tensors if name.endswith(".lqA")]
    manifest = json.loads((root / "data" / "datasets" / SAMPLES["2026-04-27"][1] / "manifest.json").read_text())
    assert manifest["datasets"][0]["text_transform"] == "lossless_caps_caseops_v1"
