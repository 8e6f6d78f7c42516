"""Each later recipe end to end on the CPU: its tiny preset through run.sh, on its bundled sample built the way run.sh
builds it. One run per recipe (a module fixture) serves every test of that recipe here: run.sh's own outcome, what
the recipe is made of as its log shows it, its training and evaluation pipeline (looping switched on at its training
fraction, the loss falling, GPTQ from the Hessians of calibration batches, the artifact's contents, the recipe's
end-of-run evals). For a test's minute, fewer val documents and the settings of OVERRIDES set in the environment,
which run.sh keeps over its preset (one thread each here). 2026-03-23's tiny preset runs end to end in
tests/test_docs.py (the README's records example)."""
import json
import math
import os
import re
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import torch

from tgpt_util import run_env, tgpt  # noqa: F401 (fixture)
from test_run_sh import SAMPLES, copy_repo_with_data_tools, job_pids, launcher_env, last_line, run_sh

# What each run sets over its recipe's tiny preset, and why:
# - fewer steps, each logged at the end too (TRAIN_LOG_EVERY), still enough for the loss to fall;
# - 2026-04-09: half the preset's tokens a step (the 8192-vocab steps take most of the time), and MLP matrices wider
#   than the 65,536-element passthrough limit, so that GPTQ quantizes some of them to int6;
# - 2026-04-27: TTT batches of 4 documents, so that its 8 val documents make two batches with the preset's global SGD
#   phases after 2 and 4 documents scored between them (its third, after 8, would follow the last document).
OVERRIDES = {
    "2026-04-09": {"ITERATIONS": "12", "WARMUP_STEPS": "1", "TRAIN_LOG_EVERY": "4", "TRAIN_BATCH_TOKENS": "2048",
                   "MODEL_DIM": "128", "MLP_MULT": "5"},
    "2026-04-27": {"ITERATIONS": "8", "WARMUP_STEPS": "1", "TRAIN_LOG_EVERY": "4", "TTT_DOC_BATCH": "4"},
}
# 2026-04-27's 8 make its two TTT batches; 2026-04-09's evals and TTT (one chunk) need only a few
VAL_DOCS = {"2026-04-09": 4, "2026-04-27": 8}
LOOPS = "encoder:[0, 1, 2, 3, 2] decoder:[3, 2, 3, 4, 5]"  # the presets' blocks 2-3 looped (LOOP_START=2, LOOP_END=3)


def build_sample(root: Path, recipe: str, val_docs: int) -> None:
    build, _, _ = SAMPLES[recipe]
    out = subprocess.run([sys.executable, "data/build_shards.py", *build, "--val-docs", str(val_docs),
                          "--no-progress", "--workers", "1"], cwd=root, env=run_env({}), capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]


class TinyRun:
    """One recipe's run through run.sh: its folder, run.sh's output, the trainer's log, its config lines, and the
    settings the trainer got (the preset's, as run.sh echoed them, and OVERRIDES)."""

    def __init__(self, root: Path, run_id: str, recipe: str, stdout: str):
        self.root, self.run_id, self.recipe, self.stdout = root, run_id, recipe, stdout
        self.log = (root / "logs" / ("%s.txt" % run_id)).read_text(encoding="utf-8")
        self.lines = self.log.splitlines()
        self.config = dict(line[len("config:"):].split("=", 1) for line in self.lines if line.startswith("config:"))
        command = next(line for line in stdout.splitlines() if line.startswith("+ RUN_ID="))
        self.preset_settings = dict(word.split("=", 1) for word in command.split()[2:]
                                    if re.match(r"[A-Z_0-9]+=", word))  # after "+ RUN_ID=<id>"
        self.settings = dict(self.preset_settings, **OVERRIDES[recipe], RECIPE=recipe)
        self.iterations = int(OVERRIDES[recipe]["ITERATIONS"])

    def artifact(self, tg):
        return tg.deserialize_artifact((self.root / "logs" / self.run_id / "final_model.int6.ptz").read_bytes())

    def train_losses(self) -> dict:
        return {int(m.group(1)): float(m.group(2)) for m in re.finditer(
            r"(?m)^step:(\d+)/%d train_loss:([\d.]+)" % self.iterations, self.log)}

    def looping_line(self) -> str:
        """The line of the step where looping switches on: the first whose training fraction reaches
        ENABLE_LOOPING_AT (0.35 in every recipe)."""
        step = math.ceil(0.35 * self.iterations)
        return "layer_loop:enabled step:%d frac:%.3f %s" % (step, step / self.iterations, LOOPS)


def tiny_run(tmp_path_factory, recipe: str):
    root = copy_repo_with_data_tools(tmp_path_factory.mktemp("tiny_" + recipe))
    build_sample(root, recipe, VAL_DOCS[recipe])
    run_id = "t%s" % uuid.uuid4().hex[:12]
    try:
        out = run_sh(root, launcher_env(run_id, dict(OVERRIDES[recipe], RECIPE=recipe)), timeout=600)
    finally:  # a failed or timed-out run must not leave a training job behind
        for pid in job_pids(run_id):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    assert out.returncode == 0 and last_line(out.stdout).startswith("run.sh: done in "), out.stdout[-4000:]
    return TinyRun(root, run_id, recipe, out.stdout)


@pytest.fixture(scope="module")
def run_0409(tmp_path_factory):
    return tiny_run(tmp_path_factory, "2026-04-09")


@pytest.fixture(scope="module")
def run_0427(tmp_path_factory):
    return tiny_run(tmp_path_factory, "2026-04-27")


def assert_run_sh_ran_the_tiny_preset(run: TinyRun) -> None:
    """The preset for a CPU, the caller's settings kept over the preset's, the recipe's sample (found where run.sh
    looks for it) and run.sh's last line."""
    first = run.stdout.splitlines()[0]
    assert first.startswith("preset: tiny (no usable NVIDIA GPU"), run.stdout[:500]
    kept = dict(word.split("=", 1) for word in first.partition("kept from the environment: ")[2].split())
    assert kept and kept.items() <= OVERRIDES[run.recipe].items(), first
    assert not set(run.preset_settings) & set(OVERRIDES[run.recipe]), run.preset_settings
    assert run.config["recipe"] == run.recipe and run.config["iterations"] == str(run.iterations)
    assert run.config["vocab_size"] == "8192"  # the recipe's sample and tokenizer, not the 1024-token ones
    assert "building the bundled sample" not in run.stdout  # the one built here lies at the recipe's default paths
    assert last_line(run.stdout).startswith("run.sh: done in ")


# ---- 2026-04-09 ----

def test_the_2026_04_09_tiny_preset_runs_end_to_end(run_0409):
    """SPEC_0409: depth recurrence switched on during training, parallel residuals, GPTQ, the artifact in the
    recipe's container and the score-first TTT."""
    run, log, config = run_0409, run_0409.log, run_0409.config
    assert_run_sh_ran_the_tiny_preset(run)
    assert int(config["num_loops"]) > 0 and re.search(r"(?m)^layer_loop:enabled step:\d+ ", log)
    assert 0 <= int(config["parallel_residual_start"]) < int(config["num_layers"])
    assert config["quantizer"] == "gptq" and re.search(r"(?m)^GPTQ:collected \d+ Hessians", log)
    assert "Serialized model int6+%s:" % config["compressor"] in log
    assert re.search(r"(?m)^legal_ttt_exact val_loss:\S+ val_bpb:\S+$", log)


def test_the_2026_04_09_pipeline_loops_learns_quantizes_and_evaluates(run_0409, tgpt):
    """The shuffled loader, the looped compile warm-up, looping switched on at 35% of the steps, the validation loss
    falling, GPTQ from Hessians of calibration batches (6 blocks x 6 matrices + tok_emb), the artifact (the MLP
    matrices, wider than the 65,536-element passthrough limit, int6; tok_emb int8; the rest fp16), the round trip,
    the sliding window and legal TTT on the looped reloaded model."""
    run = run_0409
    for line in ("loop_warmup:enabled " + LOOPS, "loop_warmup_step:1/1", run.looping_line(),
                 "GPTQ:collecting Hessians from calibration data...", "ema:applying EMA weights"):
        assert line in run.lines, line
    assert any(line.startswith("train_data loader:shuffled") for line in run.lines)
    assert any(re.fullmatch(r"GPTQ:collected 37 Hessians in [\d.]+s", line) for line in run.lines)
    for key in ("final_int6_roundtrip_exact", "final_int6_sliding_window_exact", "legal_ttt_exact"):
        assert any(line.startswith(key + " val_loss:") for line in run.lines), key
    val = {int(m.group(1)): float(m.group(2)) for m in re.finditer(
        r"(?m)^step:(\d+)/%d val_loss:([\d.]+)" % run.iterations, run.log)}
    assert sorted(val) == [0, run.iterations] and val[run.iterations] < val[0] - 0.5, val
    assert sorted(run.train_losses()) == list(range(1, 11)) + [12]
    tensors, meta = run.artifact(tgpt)
    kinds = {}
    for name, kind in meta.items():
        kinds.setdefault(kind if isinstance(kind, str) else kind["type"], []).append(name)
    assert kinds["int8"] == ["tok_emb.weight"] and sorted(kinds["int6"]) == sorted(
        f"blocks.{i}.mlp.{part}.weight" for i in range(6) for part in ("fc", "proj"))
    assert all(tensors[name].dtype == torch.float16 for name in kinds["passthrough"])


# ---- 2026-04-27 ----

def test_the_2026_04_27_tiny_preset_runs_end_to_end(run_0427, tgpt):
    """What the recipe is made of: the documents loader with its CPU attention path, the gates, two lanes, LQER,
    the pergroup compressor and the phased LoRA TTT, on CaseOps data built from the bundled sample
    (data/build_shards.py --caseops)."""
    run, log, config = run_0427, run_0427.log, run_0427.config
    assert_run_sh_ran_the_tiny_preset(run)
    assert re.search(r"(?m)^train_data loader:documents ", log)
    assert re.search(r"(?m)^doc_attention_backend:sdpa ", log)  # a CPU has no varlen kernel: a masked SDPA
    assert config["smear_gate_enabled"] == config["sparse_attn_gate_enabled"] == "True"
    assert 0 <= int(config["parallel_start_layer"]) < int(config["num_layers"])
    assert "Serialized model int6+pergroup:" in log and re.search(r"(?m)^val_bytes:\d+$", log)  # the byte sidecar
    assert re.search(r"(?m)^ttt_phased:phase after_batches:\d+ docs:\d+ ", log)
    assert re.search(r"(?m)^legal_ttt_exact val_loss:\S+ val_bpb:\S+$", log)
    tensors, _ = run.artifact(tgpt)
    assert int(config["lqer_rank"]) > 0 and [name for name in tensors if name.endswith(".lqA")]
    manifest = json.loads((run.root / "data" / "datasets" / SAMPLES["2026-04-27"][1] / "manifest.json").read_text())
    assert manifest["datasets"][0]["text_transform"] == "lossless_caps_caseops_v1"


def test_the_2026_04_27_pipeline_loops_learns_quantizes_and_evaluates(run_0427, tgpt):
    """The recipe's model (two lanes, both gates; its parameter count), the looped compile warm-up, looping from
    35% of the steps, the loss falling, GPTQ from 37 Hessians, an artifact that holds the new parameters, the
    strictly reloaded artifact's phased LoRA TTT (its global SGD phases, the record's keys) on the looped model, no
    round-trip or sliding-window eval (the recipe's defaults), eval_time split into its parts."""
    run = run_0427
    with torch.device("meta"):
        params = sum(p.numel() for p in tgpt.GPT(tgpt.Hyperparameters.from_env(run.settings)).parameters())
    for line in ("model_params:%d" % params, "loop_warmup:enabled " + LOOPS, run.looping_line()):
        assert line in run.lines, line
    assert any(re.fullmatch(r"GPTQ:collected 37 Hessians in [\d.]+s", line) for line in run.lines)
    # the recipe's data path: packed documents (SPEC_0427 §3, §5), Hessians from shuffled sequences (§8.1)
    assert any(line.startswith("train_data loader:documents shards:") for line in run.lines)
    assert any(line.startswith("train_data loader:shuffled ") for line in run.lines)
    assert re.search(r"^doc_attention_backend:sdpa \(auto; fa3_varlen unavailable .* packed_rows_qk_kernel:torch",
                     run.log, re.M)
    # §0.4: the last training read on the training clock: the loop's before its stop, the Hessians' after it
    stop_ms = float(re.search(r"^step:%d/%d val_loss:\S+ val_bpb:\S+ train_time:(\d+)ms" % (
        run.iterations, run.iterations), run.log, re.M).group(1))
    hessian_s = float(re.search(r"^GPTQ:collected 37 Hessians in ([\d.]+)s", run.log, re.M).group(1))
    reads = [float(v) for v in re.findall(r"^train_data:last_read_ms:(\d+)", run.log, re.M)]
    assert len(reads) == 2 and 0 < reads[0] <= stop_ms + 1
    assert stop_ms - 1 <= reads[1] <= stop_ms + 1000 * hessian_s + 100
    for key in ("quantized_ttt_phased", "legal_ttt_exact"):
        assert any(line.startswith(key + " val_loss:") for line in run.lines), key
    assert not any(line.startswith(("final_int6_sliding_window", "final_int6_roundtrip")) for line in run.lines)
    phases = re.findall(r"(?m)^ttt_phased:phase after_batches:(\d+) docs:(\d+) ", run.log)
    assert ("1", "2") in phases and ("1", "4") in phases, phases  # after the first batch of 4 documents
    total = int(re.search(r"^eval_time:(\d+)ms \(deserialization, .*\)$", run.log, re.M).group(1))
    split = re.search(r"^eval_time_split deserialize:(\d+)ms ttt_warmup:(\d+)ms "
                      r"ttt_loop:(\d+)ms other:(-?\d+)ms$", run.log, re.M)
    assert split and abs(sum(map(int, split.groups())) - total) <= 5, split  # the parts add up to eval_time
    train = run.train_losses()
    assert train[run.iterations] < train[1] - 1.0, train
    _, meta = run.artifact(tgpt)
    new = {"smear_gate.weight", "smear_lambda", "parallel_post_lambdas", "parallel_resid_lambdas"}
    assert new | {f"blocks.{i}.attn.attn_gate_w" for i in range(6)} <= set(meta)
