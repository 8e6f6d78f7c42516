"""records/ (python3 -m records.make): parsing our trainer's logs (two real tiny CPU runs, shared by the module)
and the challenge's line formats, the Welch p-value, building a folder (packed train_gpt.py, built aside and moved
into place), every `check` rule on crafted folders, and missing tools reported as such."""
import hashlib
import json
import math
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path
from statistics import mean, stdev
from typing import Tuple

import pytest
from scipy import stats

from tgpt_util import REPO, run_env, tiny_data, tiny_data_short_val  # noqa: F401 (fixtures)

sys.path.insert(0, str(REPO))
import records.make  # noqa: E402
from records.check import check_folder, find_python310, import_problems  # noqa: E402
from records.make import hyperparameter_defaults, main as records_main, welch_improvement_test  # noqa: E402
from records.pack import pack_source, read_source, strip_source  # noqa: E402
from records.parse import choose_headline, parse_log, parse_log_text  # noqa: E402

SEEDS = (1337, 42)
TRACK = "track_non_record_16mb"  # the tiny CPU runs are no record: the challenge's non-record track takes them
SCRIPT = REPO / "train_gpt.py"
STRIPPED = strip_source(read_source(SCRIPT))  # what the counted file runs and the logs hash
PACKED = pack_source(STRIPPED)
SOURCE_END = "=" * 100 + "\nRunning Python"
# A few steps with a val line at 0, 3 and 6; once the trainer has its end-of-run evals, keep them tiny too.
RUN_SETTINGS = {"ITERATIONS": "6", "VAL_LOSS_EVERY": "3", "TRAIN_LOG_EVERY": "1"}
EVAL_SETTINGS = {"EVAL_STRIDE": "32", "TTT_CHUNK_TOKENS": "8192", "TTT_EPOCHS": "1"}


# ---- hand-written logs in the challenge's formats (SPEC §9) ----
def challenge_log(seed, val_loss, val_bpb, total_bytes=15_977_386, ttt=True, noise=True):
    """A torchrun console copy in the 2026-03-23 record's format (pre-TTT = post-TTT + 0.0024 bpb)."""
    pre_loss, pre_bpb = val_loss + 0.004, val_bpb + 0.0024
    lines = []
    if noise:
        lines += ["W0323 10:00:00.000000 1 site-packages/torch/distributed/run.py:792] ",
                  "W0323 10:00:00.000000 1 site-packages/torch/distributed/run.py:792] *****",
                  "W0323 10:00:00.000000 1 site-packages/torch/distributed/run.py:792] Setting OMP_NUM_THREADS "
                  "environment variable for each process to be 1 in default"]
    lines += ["logs/%s.txt" % seed,
              "val_bpb:enabled tokenizer_kind=sentencepiece tokenizer_path=/root/data/fineweb_1024_bpe.model",
              "train_loader:dataset:fineweb10B_sp1024 train_shards:80",
              "val_loader:shards pattern=/root/data/fineweb_val_*.bin tokens:62021632",
              "model_params:26928220", "mtp_num_heads:0 mtp_loss_weight:0.2 mtp_params:0",
              "XSA:last_4 active_layers:[7, 8, 9, 10]", "world_size:8 grad_accum_steps:1",
              "sdp_backends:cudnn=False flash=True mem_efficient=False math=False",
              "attention_mode:gqa num_heads:8 num_kv_heads:4",
              "tie_embeddings:True embed_lr:0.035 head_lr:0.0 matrix_lr:0.025 scalar_lr:0.025",
              "train_batch_tokens:786432 train_seq_len:2048 iterations:9000 warmup_steps:20 "
              "max_wallclock_seconds:600.000", "seed:%d" % seed, "warmup_step:1/20", "warmup_step:20/20",
              "step:0/9000 val_loss:6.9309 val_bpb:4.1048 train_time:0ms step_avg:0.02ms",
              "step:1/9000 train_loss:6.9317 train_time:133ms step_avg:133.10ms",
              "step:500/9000 train_loss:2.3811 train_time:41700ms step_avg:83.40ms"]
    if noise:
        lines += ["[rank3]:[W323 10:00:10.1 Utils.hpp:137] Warning: Environment variable NCCL_ASYNC_ERROR_HANDLING",
                  "step:4000/9000 corrupted-by-another-process train_loss:2.1 train_time:1ms step_avg:1.00ms"]
    lines += ["step:4000/9000 val_loss:2.0577 val_bpb:1.2187 train_time:333600ms step_avg:83.40ms",
              "swa:start step:6500", "late_qat:enabled step:6662 scale:0.1498",
              "step:7179/9000 val_loss:1.9213 val_bpb:1.1379 train_time:600128ms step_avg:83.59ms",
              "stopping_early: wallclock_cap train_time:600128ms step:7179/9000",
              "peak memory allocated: 21471 MiB reserved: 22002 MiB", "ema:applying EMA weights",
              "DIAGNOSTIC post_ema val_loss:1.9196 val_bpb:1.1369 eval_time:1971ms",
              "Serialized model: 106027446 bytes", "Code size: 89458 bytes",
              "Serialized model int6+lzma: %d bytes" % (total_bytes - 89458),
              "Total submission size int6+lzma: %d bytes" % total_bytes,
              "final_int6_roundtrip val_loss:1.9336 val_bpb:1.1452 eval_time:6562ms",
              "final_int6_roundtrip_exact val_loss:1.93360000 val_bpb:1.14518023",
              "final_int6_sliding_window val_loss:%.4f val_bpb:%.4f stride:64 eval_time:74066ms" % (pre_loss, pre_bpb),
              "final_int6_sliding_window_exact val_loss:%.8f val_bpb:%.8f" % (pre_loss, pre_bpb),
              "final_int8_zlib_roundtrip_exact val_loss:%.8f val_bpb:%.8f" % (pre_loss, pre_bpb)]
    if ttt:
        lines += ["ttt_sliding:start chunks=1893 chunk_tokens=32768 total_windows=969088 stride=64 ttt_lr=0.002 "
                  "ttt_epochs=3 freeze_blocks=0", "ttt_sliding:params unfrozen=26928220 frozen=0",
                  "  ttt_chunk [1/1893] bpb=1.156789 time=0.3s",
                  "ttt_sliding:done val_loss=%.6f val_bpb=%.6f elapsed=410.3s" % (val_loss, val_bpb),
                  "legal_ttt val_loss:%.4f val_bpb:%.4f eval_time:410268ms" % (val_loss, val_bpb),
                  "legal_ttt_exact val_loss:%.8f val_bpb:%.8f" % (val_loss, val_bpb)]
    return "\n".join(lines) + "\n"


BASELINE_TAIL = """step:13780/20000 val_loss:2.0606 val_bpb:1.2172 train_time:600038ms step_avg:43.54ms
stopping_early: wallclock_cap train_time:600038ms step:13780/20000
peak memory allocated: 10184 MiB reserved: 10200 MiB
Serialized model: 67224983 bytes
Code size: 47642 bytes
Total submission size: 67272625 bytes
Serialized model int8+zlib: 15815847 bytes (payload:17178912 raw_torch:17224025 payload_ratio:3.91x)
Total submission size int8+zlib: 15863489 bytes
final_int8_zlib_roundtrip val_loss:2.0727 val_bpb:1.2244 eval_time:1401ms
final_int8_zlib_roundtrip_exact val_loss:2.07269931 val_bpb:1.22436570
"""

NVIDIA_SMI = """+-----------------------------------------------------------------------------------------+
| NVIDIA-SMI 570.124.06             Driver Version: 570.124.06     CUDA Version: 12.8     |
|-----------------------------------------+------------------------+----------------------+
| GPU  Name                 Persistence-M | Bus-Id          Disp.A | Volatile Uncorr. ECC |
|=========================================+========================+======================|
""" + "".join("|   %d  NVIDIA H100 80GB HBM3          On  |   00000000:%02X:00.0 Off |%s0 |\n" % (i, i, " " * 20)
              for i in range(8))


def our_final_lines(seed, code_bytes):
    """SPEC §9 lines 18-24 as our trainer prints them (no int8 key), for logs of a trainer without them yet."""
    loss = 6.9 + (seed % 97) * 1e-4
    bpb = loss * 0.6155
    model_bytes = 400_000 + seed
    return "\n".join([
        "ema:applying EMA weights", "DIAGNOSTIC post_ema val_loss:%.4f val_bpb:%.4f eval_time:15ms" % (loss, bpb),
        "Serialized model: 1000000 bytes", "Code size: %d bytes" % code_bytes,
        "Serialized model int6+lzma: %d bytes" % model_bytes,
        "Total submission size int6+lzma: %d bytes" % (model_bytes + code_bytes),
        "submission_bytes code_bytes:%d model_bytes:%d total_bytes:%d limit_bytes:16000000"
        % (code_bytes, model_bytes, model_bytes + code_bytes),
        "final_int6_roundtrip val_loss:%.4f val_bpb:%.4f eval_time:20ms" % (loss + 0.01, bpb + 0.006),
        "final_int6_roundtrip_exact val_loss:%.8f val_bpb:%.8f" % (loss + 0.01, bpb + 0.006),
        "final_int6_sliding_window val_loss:%.4f val_bpb:%.4f stride:32 eval_time:30ms" % (loss + 0.004, bpb + 0.0024),
        "final_int6_sliding_window_exact val_loss:%.8f val_bpb:%.8f" % (loss + 0.004, bpb + 0.0024),
        "ttt_sliding:done val_loss=%.6f val_bpb=%.6f elapsed=0.1s" % (loss, bpb),
        "legal_ttt val_loss:%.4f val_bpb:%.4f eval_time:40ms" % (loss, bpb),
        "legal_ttt_exact val_loss:%.8f val_bpb:%.8f" % (loss, bpb)]) + "\n"


def edit_after_source(path: Path, edit) -> None:
    """Apply `edit` to the log's lines after the embedded source (the source and its sha stay intact)."""
    text = path.read_text(encoding="utf-8")
    cut = text.find(SOURCE_END)
    cut = 0 if cut < 0 else cut
    path.write_text(text[:cut] + edit(text[cut:]), encoding="utf-8")


# ---- shared fixtures: two real runs, completed logs, a baseline folder, a good record folder ----
@pytest.fixture(scope="module")
def real_logs(tiny_data_short_val, tmp_path_factory):
    """Two real tiny CPU runs of train_gpt.py (seeds 1337, 42); the trainer's file logs. Validation on a few
    documents: what is read from the logs does not depend on the val set."""
    workdir = tmp_path_factory.mktemp("record_runs")
    settings = dict(RUN_SETTINGS)
    if "ttt_chunk_tokens" in hyperparameter_defaults(SCRIPT.read_text(encoding="utf-8")):
        settings.update(EVAL_SETTINGS)
    logs = {}
    for seed in SEEDS:
        env = run_env(dict(tiny_data_short_val["env"], **settings, SEED=str(seed), RUN_ID="rec_seed%d" % seed))
        result = subprocess.run([sys.executable, str(SCRIPT)], cwd=workdir, env=env, capture_output=True,
                                text=True, timeout=900)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
        logs[seed] = workdir / "logs" / ("rec_seed%d.txt" % seed)
    return logs


@pytest.fixture(scope="module")
def complete_logs(real_logs, tmp_path_factory):
    """The real logs, with our end-of-run lines appended where the trainer does not print them yet."""
    folder = tmp_path_factory.mktemp("complete_logs")
    paths = {}
    for seed, path in real_logs.items():
        text = path.read_text(encoding="utf-8")
        if "legal_ttt_exact" not in text:
            text += our_final_lines(seed, len(PACKED))
        paths[seed] = folder / path.name
        paths[seed].write_text(text, encoding="utf-8")
    return paths


@pytest.fixture(scope="module")
def baseline_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("baseline")
    for seed, loss in ((1337, 7.1), (42, 7.2), (2025, 7.15)):
        (folder / ("train_seed%d.log" % seed)).write_text(challenge_log(seed, loss, loss * 0.6155), encoding="utf-8")
    return folder


def make_record(out: Path, logs, *extra) -> Tuple[int, Path]:
    argv = ["make", "--name", "Tiny CPU smoke", "--author", "Test Author", "--github-id", "tester",
            "--script", str(SCRIPT), "--out", str(out), "--date", "2026-11-22", "--skip-import-check"]
    track = TRACK if "--track" not in extra else extra[list(extra).index("--track") + 1]
    rc = records_main(argv + (["--track", TRACK] if "--track" not in extra else []) + list(extra)
                      + [str(path) for path in logs])
    return rc, out / track / "2026-11-22_Tiny_CPU_smoke"


@pytest.fixture(scope="module")
def good_folder(complete_logs, baseline_dir, tmp_path_factory):
    rc, folder = make_record(tmp_path_factory.mktemp("records"), complete_logs.values(),
                             "--baseline", str(baseline_dir), "--allow-baseline-mismatch")  # the record's FineWeb
    assert rc == 0
    return folder


def test_a_baseline_of_other_data_is_refused_unless_allowed(complete_logs, baseline_dir, tmp_path, capsys):
    """The baseline's logs scored FineWeb's 62,021,632 validation tokens, these the tiny sample's: a p-value
    between them compares data sets, not training."""
    rc, folder = make_record(tmp_path, complete_logs.values(), "--baseline", str(baseline_dir))
    out = capsys.readouterr().out
    assert rc == 2 and not folder.exists() and not (tmp_path / TRACK).exists()
    assert "--baseline: validation tokens" in out and "62021632 in the baseline's" in out, out
    same = tmp_path / "same_data"
    same.mkdir()
    for seed, path in complete_logs.items():  # the runs themselves as the baseline: the same data, accepted
        shutil.copy(path, same / ("train_seed%d.log" % seed))
    from records.make import baseline_data_problems
    runs = [parse_log(path) for path in complete_logs.values()]
    assert runs[0].val_tokens and runs[0].val_bytes  # this tiny data set has no manifest: no tokenizer line
    assert baseline_data_problems(runs, [parse_log(path) for path in same.iterdir()]) == []
    identity = "tokenizer_identity: sha256 %s... is the tokenizer 'sp' of data/manifest.json"
    ours, theirs = parse_log_text(identity % ("a" * 16)), parse_log_text(identity % ("b" * 16))
    assert (ours.tokenizer_sha256, theirs.tokenizer_sha256) == ("a" * 16, "b" * 16)
    assert baseline_data_problems([ours], [theirs]) == [
        "--baseline: tokenizer sha256 %s in the logs, %s in the baseline's: other data or another tokenizer "
        "(--allow-baseline-mismatch compares them anyway)" % ("a" * 16, "b" * 16)]
    assert baseline_data_problems([ours], [ours]) == []


@pytest.fixture
def bad_folder(good_folder, tmp_path):
    copy = tmp_path / TRACK / good_folder.name
    shutil.copytree(good_folder, copy)
    return copy


def problems_of(folder, **kwargs):
    kwargs.setdefault("run_import", False)
    kwargs.setdefault("python310", None)
    return check_folder(folder, **kwargs)[0]


# ---- parsing ----
def test_real_run_logs_parse(real_logs):
    digest = hashlib.sha256(STRIPPED.encode("utf-8")).hexdigest()
    runs = [parse_log(real_logs[seed]) for seed in SEEDS]
    for seed, run in zip(SEEDS, runs):
        assert (run.seed, run.run_id, run.config["seed"]) == (seed, "rec_seed%d" % seed, str(seed))
        assert run.code_sha256 == digest and run.source_sha256() == digest
        assert (run.steps, run.iterations, run.world_size) == (6, 6, 1)
        assert [step for step, _ in run.train_curve] == [1, 2, 3, 4, 5, 6]
        assert [step for step, _, _ in run.val_curve] == [0, 3, 6]
        assert run.step_avg_ms > 0 and run.train_time_ms > 0 and math.isfinite(run.val_curve[-1][2])
        assert run.python_version == platform.python_version() and run.pytorch_version
        assert run.config["num_layers"] == "4" and run.val_tokens > 0
        if "legal_ttt_exact" in run.exact:  # the trainer prints its end-of-run lines
            assert run.absent() == [] and run.bytes_total < 16_000_000 and run.bytes_code == len(PACKED)
            assert run.bytes_code_readable == len(STRIPPED.encode("utf-8"))
            assert run.run_count == 1
        else:  # not yet: every absent result is named, nothing crashes
            assert run.absent() == ["artifact bytes (Total submission size ...)",
                                    "final round-trip score (final_int6_roundtrip_exact)",
                                    "pre-TTT sliding score (final_int6_sliding_window_exact)",
                                    "post-TTT score (legal_ttt_exact)"]
            assert choose_headline(runs).key is None


def test_challenge_console_log_parses():
    run = parse_log_text(challenge_log(1337, 1.889813, 1.11922988), "train_seed1337.log")
    assert (run.seed, run.steps, run.iterations) == (1337, 7179, 9000)
    assert (run.train_time_ms, run.step_avg_ms) == (600128, 83.59)
    assert run.stopped_early and run.world_size == 8 and run.val_tokens == 62021632
    assert run.exact["legal_ttt_exact"] == (1.889813, 1.11922988)
    assert run.score(("final_int6_sliding_window_exact",))[2] == pytest.approx(1.12162988)
    assert (run.bytes_model, run.bytes_code, run.bytes_total) == (15887928, 89458, 15977386)
    assert run.eval_time_ms["legal_ttt"] == 410268 and run.peak_memory_mib == 21471
    assert [step for step, _ in run.train_curve] == [1, 500]  # the corrupted line is skipped
    assert run.code_sha256 is None and "code_sha256 line" in run.absent() and "config: lines" in run.absent()
    headline = choose_headline([run])
    assert headline.key == "legal_ttt_exact" and "post-TTT" in headline.note


def test_parse_command_prints_per_seed_json(tmp_path, capsys):
    path = tmp_path / "train_seed42.log"
    path.write_text("config:ttt_enabled=False\n" + challenge_log(42, 1.89, 1.12, ttt=False), encoding="utf-8")
    assert records_main(["parse", str(path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["headline"]["key"] == "final_int6_sliding_window_exact"
    (seed,) = report["seeds"]
    assert (seed["seed"], seed["steps"], seed["post_ttt"], seed["bytes_total"]) == (42, 7179, None, 15977386)
    assert seed["absent"] == ["code_sha256 line"]  # TTT was off, so its score is not missing


def test_an_eval_switched_off_is_not_an_absent_result():
    """2026-04-27 runs no round trip and no sliding window (ROUNDTRIP_EVAL=0, SLIDING_EVAL=0): their scores are not
    missing from its logs; they are from a log that had them on."""
    tail = "step:6/6 train_loss:1.0 train_time:6ms step_avg:1.00ms\nTotal submission size int6+pergroup: 9 bytes\n" \
           "legal_ttt_exact val_loss:1.00000000 val_bpb:0.50000000\n"
    off = parse_log_text("code_sha256:%s\nconfig:roundtrip_eval=False\nconfig:sliding_eval=False\n%s" % ("0" * 64, tail))
    assert off.absent() == []
    on = parse_log_text("code_sha256:%s\nconfig:roundtrip_eval=True\n%s" % ("0" * 64, tail))
    assert on.absent() == ["final round-trip score (final_int6_roundtrip_exact)",
                           "pre-TTT sliding score (final_int6_sliding_window_exact)"]


def test_baseline_log_headline_is_its_int8_line_and_bytes_are_the_compressed_total():
    run = parse_log_text("seed:1337\n" + BASELINE_TAIL)
    assert run.bytes_total == 15863489 and run.bytes_model == 15815847 and run.artifact_format == "int8+zlib"
    headline = choose_headline([run])
    assert headline.key == "final_int8_zlib_roundtrip_exact" and "no legal_ttt_exact" in headline.note
    assert run.exact[headline.key] == (2.07269931, 1.22436570)


def test_file_log_source_and_nvidia_smi():
    source = '"""Docs quoting a log:\nlegal_ttt_exact val_loss:0.1 val_bpb:0.1\nstep:5/9 train_loss:0.5 ' \
             'train_time:1ms step_avg:1.00ms\n"""\nprint("hi")\n'
    versions = "Running Python 3.12.3 (main) [GCC]\nRunning PyTorch 2.9.1+cu128\n"
    text = (source + "\n" + "=" * 100 + "\n" + versions + NVIDIA_SMI + "=" * 100 + "\n"
            + challenge_log(42, 1.89, 1.12, noise=False))
    run = parse_log_text(text)
    assert run.exact["legal_ttt_exact"] == (1.89, 1.12) and 5 not in [step for step, _ in run.train_curve]
    assert run.source == source and (run.python_version, run.pytorch_version) == ("3.12.3", "2.9.1+cu128")
    assert run.gpu_names == ["NVIDIA H100 80GB HBM3"] * 8
    assert (run.driver_version, run.cuda_version) == ("570.124.06", "12.8")


def test_headline_without_ttt_says_which_score_it_is():
    off = parse_log_text("config:ttt_enabled=False\n" + challenge_log(1, 1.9, 1.12, ttt=False))
    headline = choose_headline([off])
    assert headline.key == "final_int6_sliding_window_exact" and "TTT was off" in headline.note
    on = parse_log_text("config:ttt_enabled=True\n" + challenge_log(2, 1.9, 1.12, ttt=False))
    headline = choose_headline([on, parse_log_text(challenge_log(3, 1.9, 1.12))])
    assert headline.key == "final_int6_sliding_window_exact" and "ABSENT" in headline.note


# ---- statistics ----
def test_welch_p_value_matches_hand_computation():
    new = [2.8101, 2.8123, 2.8090]
    base = [2.8251, 2.8270, 2.8236, 2.8262]
    margin = 0.005
    mean_new, mean_base = sum(new) / 3, sum(base) / 4
    var_new = sum((x - mean_new) ** 2 for x in new) / 2 / 3  # sample variance / n
    var_base = sum((x - mean_base) ** 2 for x in base) / 3 / 4
    t_value = (mean_base - mean_new - margin) / math.sqrt(var_new + var_base)
    dof = (var_new + var_base) ** 2 / (var_new ** 2 / 2 + var_base ** 2 / 3)
    expected = stats.t.sf(t_value, dof)
    result = welch_improvement_test(new, base, margin)
    assert result["t"] == pytest.approx(t_value, rel=1e-9) and result["dof"] == pytest.approx(dof, rel=1e-9)
    assert result["p_value"] == pytest.approx(expected, rel=1e-7)
    assert 0.0 < expected < 0.01  # these numbers clear the bar; an improvement of 0.02 nats is not shown
    assert welch_improvement_test(new, base, 0.02)["p_value"] > 0.5
    assert welch_improvement_test(new[:1], base)["p_value"] is None


# ---- make ----
def test_make_names_constriction_when_the_seeds_wrote_pergroup_artifacts(complete_logs, tmp_path):
    logs = []
    for path in complete_logs.values():
        logs.append(tmp_path / path.name)
        shutil.copyfile(path, logs[-1])
        edit_after_source(logs[-1], lambda text: text.replace("config:compressor=brotli", "config:compressor=pergroup"))
    rc, folder = make_record(tmp_path / "out", logs)
    assert rc == 0 and "\nconstriction>=0.5\n" in (folder / "requirements.txt").read_text()


def test_make_writes_a_folder_that_passes_check(good_folder, complete_logs, baseline_dir):
    names = sorted(path.name for path in good_folder.iterdir())
    assert names == ["README.md", "curves.png", "requirements.txt", "submission.json", "train_gpt.py",
                     "train_gpt_readable.py", "train_seed1337.log", "train_seed42.log"]
    assert (good_folder / "train_gpt.py").read_bytes() == PACKED  # the counted file: the packed source
    assert "brotli" in (good_folder / "requirements.txt").read_text()
    assert "constriction" not in (good_folder / "requirements.txt").read_text()  # the seeds' COMPRESSOR=brotli
    assert (good_folder / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = [parse_log(complete_logs[seed]) for seed in SEEDS]
    submission = json.loads((good_folder / "submission.json").read_text())
    assert submission["metric"] == "legal_ttt_exact"
    assert submission["val_bpb"] == round(mean(r.exact["legal_ttt_exact"][1] for r in runs), 8)
    assert submission["val_loss"] == round(mean(r.exact["legal_ttt_exact"][0] for r in runs), 8)
    assert submission["val_bpb_std"] == round(stdev(r.exact["legal_ttt_exact"][1] for r in runs), 8)
    assert submission["bytes_total"] == max(r.bytes_total for r in runs)
    assert submission["bytes_code"] == len(PACKED) and sorted(submission["seeds"]) == [42, 1337]
    assert submission["bytes_code_readable"] == len(SCRIPT.read_bytes())
    assert submission["code_sha256"] == hashlib.sha256(STRIPPED.encode("utf-8")).hexdigest()
    assert (good_folder / "train_gpt_readable.py").read_bytes() == SCRIPT.read_bytes()
    assert (submission["author"], submission["github_id"]) == ("Test Author", "tester")
    assert submission["date"] == "2026-11-22"
    baseline_losses = [7.1, 7.2, 7.15]
    expected = welch_improvement_test([r.exact["legal_ttt_exact"][0] for r in runs], baseline_losses)
    assert submission["baseline"]["p_value"] == pytest.approx(expected["p_value"])
    readme = (good_folder / "README.md").read_text()
    assert "](curves.png)" in readme and "torchrun --standalone --nproc_per_node=1 train_gpt.py" in readme
    assert "SEED=42 RUN_ID=rec_seed42" in readme and "NUM_LAYERS=4" in readme
    assert ("**MEETS**" if expected["p_value"] < 0.01 else "**MISSES**") in readme and "val_loss" in readme
    assert "Python %s" % platform.python_version() in readme
    assert "train_gpt.py: %d bytes" % len(PACKED) in readme and "records.pack unpack" in readme
    problems, _ = check_folder(good_folder, run_import=True)  # the real import check and python3.10, once
    assert problems == []


def test_make_refuses_mixed_configs_and_another_script(complete_logs, tmp_path):
    edited = tmp_path / "rec_seed42.txt"
    shutil.copyfile(complete_logs[42], edited)
    edit_after_source(edited, lambda text: text.replace("config:num_layers=4", "config:num_layers=5"))
    rc, folder = make_record(tmp_path / "out", [complete_logs[1337], edited])
    assert rc == 2 and not folder.exists()
    other_script = tmp_path / "train_gpt.py"
    other_script.write_bytes(SCRIPT.read_bytes() + b"# changed after the runs\n")
    rc = records_main(["make", "--name", "x", "--author", "a", "--github-id", "g", "--script", str(other_script),
                       "--out", str(tmp_path / "out2"), str(complete_logs[1337])])
    assert rc == 2 and not (tmp_path / "out2").exists()


def test_make_refuses_a_log_that_counted_the_readable_file_or_holds_two_runs(complete_logs, tmp_path, capsys):
    readable_count = tmp_path / "rec_seed42.txt"
    text = complete_logs[42].read_text(encoding="utf-8")
    for counted in ("Code size: %d bytes", "code_bytes:%d "):  # as today's trainer counts: the readable file
        text = text.replace(counted % len(PACKED), counted % len(STRIPPED.encode("utf-8")))
    readable_count.write_text(text, encoding="utf-8")
    rc, folder = make_record(tmp_path / "out", [complete_logs[1337], readable_count])
    assert rc == 2 and not (tmp_path / "out").exists()
    assert "rec_seed42.txt: Code size %d bytes is the readable source's size, but the counted file train_gpt.py is " \
           "packed (%d bytes)" % (len(STRIPPED.encode("utf-8")), len(PACKED)) in capsys.readouterr().out
    two_runs = tmp_path / "rec_seed1337.txt"
    two_runs.write_text(complete_logs[1337].read_text(encoding="utf-8") * 2, encoding="utf-8")
    rc, folder = make_record(tmp_path / "out", [two_runs, complete_logs[42]])
    assert rc == 2 and not (tmp_path / "out").exists()
    assert "rec_seed1337.txt: holds 2 runs" in capsys.readouterr().out


def test_make_builds_aside_and_moves_the_folder_into_place_only_when_complete(complete_logs, tmp_path,
                                                                            monkeypatch):
    def crash(*args):
        raise RuntimeError("simulated crash while drawing the curves")
    with monkeypatch.context() as patch:
        patch.setattr(records.make, "draw_curves", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            make_record(tmp_path / "out", complete_logs.values())
    track = tmp_path / "out" / TRACK
    assert list(track.iterdir()) == []  # neither the folder nor the build folder is left
    rc, folder = make_record(tmp_path / "out", complete_logs.values())
    assert rc == 0 and (folder / "curves.png").is_file()
    (folder / "ablations.md").write_text("kept\n")
    readme = (folder / "README.md").read_bytes()
    with monkeypatch.context() as patch:
        patch.setattr(records.make, "draw_curves", crash)
        with pytest.raises(RuntimeError, match="simulated crash"):
            make_record(tmp_path / "out", complete_logs.values(), "--force")
    assert (folder / "README.md").read_bytes() == readme and sorted(p.name for p in track.iterdir()) == [folder.name]
    rc, folder = make_record(tmp_path / "out", [complete_logs[1337]], "--force")
    assert rc == 0 and (folder / "ablations.md").read_text() == "kept\n"
    assert sorted(p.name for p in folder.glob("train_seed*.log")) == ["train_seed1337.log"]


def test_make_reports_a_missing_tool_module_and_writes_nothing(complete_logs, tmp_path):
    argv = ["make", "--name", "x", "--author", "a", "--github-id", "g", "--script", str(SCRIPT), "--out",
            str(tmp_path / "out")] + [str(path) for path in complete_logs.values()]
    probe = "import sys; sys.modules['matplotlib'] = None; from records.make import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", probe] + argv, cwd=REPO, env=run_env({}), capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 2 and not (tmp_path / "out").exists()
    assert result.stderr.startswith("error: records.make make needs matplotlib, which this Python (")
    assert "tools/py -m records.make" in result.stderr and "Traceback" not in result.stderr


def test_make_reports_absent_results_and_check_fails_without_the_headline(complete_logs, tmp_path):
    truncated = []
    for seed in SEEDS:
        text = complete_logs[seed].read_text(encoding="utf-8")
        last_step = text.rfind("\nstep:6/6 val_loss")
        path = tmp_path / ("rec_seed%d.txt" % seed)
        path.write_text(text[:text.index("\n", last_step + 1) + 1], encoding="utf-8")
        truncated.append(path)
    rc, folder = make_record(tmp_path / "out", truncated)
    assert rc == 1
    readme = (folder / "README.md").read_text()
    assert "## Absent results" in readme and "post-TTT score (legal_ttt_exact)" in readme
    assert json.loads((folder / "submission.json").read_text())["val_bpb"] is None
    problems = problems_of(folder)
    assert any("train_seed42.log" in p and "headline" in p for p in problems)


# ---- check: each rule fails on a crafted folder ----
def test_check_missing_required_file(bad_folder):
    (bad_folder / "README.md").unlink()
    assert "missing required file README.md" in problems_of(bad_folder)


def test_check_script_differs_from_the_logs(bad_folder):
    (bad_folder / "train_gpt.py").write_bytes(pack_source(read_source(SCRIPT) + "# edited after the runs\n"))
    problems = problems_of(bad_folder)
    assert any(p.startswith("train_seed1337.log: code_sha256") and "differs from the source packed in train_gpt.py"
               in p and "another version of the script" in p for p in problems)


def test_check_one_byte_edit_of_the_packed_payload(bad_folder):
    text = (bad_folder / "train_gpt.py").read_text(encoding="ascii")
    at = text.index('_p="') + 1000
    (bad_folder / "train_gpt.py").write_text(text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1:],
                                            encoding="ascii")
    problems = problems_of(bad_folder)
    assert problems[0].startswith("train_gpt.py: the packed source "), problems
    assert "the file was edited after packing" in problems[0]


def test_check_log_from_another_code_version_is_named(bad_folder):
    path = bad_folder / "train_seed42.log"
    text = path.read_text(encoding="utf-8")
    source = STRIPPED
    other = source + "# another version\n"
    text = text.replace(source, other, 1).replace(hashlib.sha256(source.encode()).hexdigest(),
                                                  hashlib.sha256(other.encode()).hexdigest(), 1)
    path.write_text(text, encoding="utf-8")
    problems = problems_of(bad_folder)
    assert [p for p in problems if "another version" in p] == [
        "train_seed42.log: code_sha256 %s... differs from the source packed in train_gpt.py's %s...: the log comes "
        "from another version of the script" % (hashlib.sha256(other.encode()).hexdigest()[:12],
                                                hashlib.sha256(source.encode()).hexdigest()[:12])]


def test_check_log_that_hashed_the_packed_file_itself(bad_folder):
    path = bad_folder / "train_seed42.log"
    text = path.read_text(encoding="utf-8")
    digest = hashlib.sha256(STRIPPED.encode("utf-8")).hexdigest()
    path.write_text(text.replace(digest, hashlib.sha256(PACKED).hexdigest(), 1), encoding="utf-8")
    assert "train_seed42.log: code_sha256 is the sha256 of the packed train_gpt.py itself: the trainer that ran " \
           "hashed the file it was started from, not the source it runs (it must read its source through " \
           "linecache, records/pack.py)" in problems_of(bad_folder)


def test_check_log_holding_two_runs(bad_folder):
    path = bad_folder / "train_seed42.log"
    first = path.read_text(encoding="utf-8")
    path.write_text(first + first[:first.index("\n", first.index("config:")) + 1], encoding="utf-8")
    problems = problems_of(bad_folder)
    assert "train_seed42.log: holds 2 runs (a run was appended to the same logs/<RUN_ID>.txt): a record log must " \
           "hold exactly one run" in problems


def test_check_reports_a_module_the_checker_lacks_not_a_defect_of_the_submission(good_folder, tmp_path):
    stub = tmp_path / "no_torch" / "torch"
    stub.mkdir(parents=True)
    (stub / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'torch'\", name='torch')\n")
    result = subprocess.run([sys.executable, "-m", "records.make", "check", str(good_folder)], cwd=REPO,
                            env=run_env({"PYTHONPATH": str(tmp_path / "no_torch")}), capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert "error: records.make check needs torch to import train_gpt.py" in result.stderr
    assert "import failed" not in result.stderr and "could not be checked with this Python" in result.stderr
    probe = "import sys; sys.modules['brotli'] = None; from records.make import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", probe, "check", "--skip-import-check", str(good_folder)],
                            cwd=REPO, env=run_env({}), capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith("error: records.make check needs brotli, which this Python (")


def test_check_configs_differ_between_seeds(bad_folder):
    edit_after_source(bad_folder / "train_seed42.log",
                      lambda text: text.replace("config:matrix_lr=0.025", "config:matrix_lr=0.03"))
    problems = problems_of(bad_folder)
    assert any(p.startswith("config differs between seeds: matrix_lr:") for p in problems)


def test_check_seed_over_the_size_cap(bad_folder):
    def inflate(text):
        text = re.sub(r"Total submission size int6\+(\w+): \d+ bytes",
                      r"Total submission size int6+\1: 16000001 bytes", text)
        return re.sub(r"total_bytes:\d+", "total_bytes:16000001", text)
    edit_after_source(bad_folder / "train_seed42.log", inflate)
    assert "train_seed42.log: total size 16000001 bytes is over the 16000000-byte cap by 1" in problems_of(bad_folder)


def test_check_python_310_grammar(bad_folder):
    source = read_source(SCRIPT) + "try:\n    pass\nexcept* ValueError:\n    pass\n"
    (bad_folder / "train_gpt.py").write_bytes(pack_source(source))  # the wrapper parses, its payload does not
    problems = problems_of(bad_folder)
    assert any(re.match(r"train_gpt\.py \(packed source\):\d+: does not parse with the Python 3\.10 grammar", p)
               for p in problems), problems


def test_check_real_python_310_compile(bad_folder):
    python310 = find_python310()
    if python310 is None:
        pytest.skip("no python3.10 on this machine")
    source = read_source(SCRIPT) + "pieces = {}\nvalue = pieces[*(1, 2)]\n"  # 3.11 syntax ast's feature_version misses
    (bad_folder / "train_gpt.py").write_bytes(pack_source(source))
    problems = problems_of(bad_folder, python310=python310)
    assert any(p.startswith("train_gpt.py (packed source): python3.10 py_compile fails") for p in problems), problems
    assert not any("does not parse with the Python 3.10 grammar" in p for p in problems)


def test_check_import_side_effects(tmp_path):
    script = tmp_path / "train_gpt.py"
    script.write_text("import socket\nopen('side_effect.txt', 'w').write('x')\n"
                      "try:\n    socket.create_connection(('example.com', 80), timeout=1)\nexcept OSError:\n    pass\n")
    problems = import_problems(script)
    assert any("import created files: side_effect.txt" in p for p in problems)
    assert any("tried to open network connections" in p for p in problems)
    script.write_text("raise RuntimeError('needs a GPU at import')\n")
    assert import_problems(script) == ["train_gpt.py: import failed: RuntimeError: needs a GPU at import"]
    script.write_text("import os\nVALUE = 1\n")
    assert import_problems(script) == []


def test_check_misnamed_logs(bad_folder):
    (bad_folder / "train_seed42.log").rename(bad_folder / "train_seed43.log")
    shutil.copyfile(bad_folder / "train_seed1337.log", bad_folder / "train.log")
    problems = problems_of(bad_folder)
    assert "train_seed43.log: misnamed log: it ran seed 42 (name it train_seed42.log)" in problems
    assert "train.log: misnamed log: a train log must be named train_seed<N>.log" in problems


def test_check_log_without_headline_line(bad_folder):
    edit_after_source(bad_folder / "train_seed42.log",
                      lambda text: re.sub(r"(?m)^legal_ttt(_exact)? .*\n", "", text))
    problems = problems_of(bad_folder)
    assert "train_seed42.log: no legal_ttt_exact line (the headline score): the run did not finish its evaluation" \
        in problems


def test_check_submission_val_bpb_is_not_the_headline(bad_folder):
    path = bad_folder / "submission.json"
    submission = json.loads(path.read_text())
    submission["val_bpb"] = submission["pre_ttt_val_bpb"]  # the pre-TTT score instead of the headline
    path.write_text(json.dumps(submission))
    problems = problems_of(bad_folder)
    assert any(p.startswith("submission.json: val_bpb") and "is not the headline" in p for p in problems)
    submission["metric"] = "final_int6_sliding_window_exact"  # declaring the pre-TTT score does not help
    path.write_text(json.dumps(submission))
    problems = problems_of(bad_folder)
    assert "submission.json metric is final_int6_sliding_window_exact but the logs ran TTT: the headline is " \
           "legal_ttt_exact" in problems
    assert any(p.startswith("submission.json: val_bpb") and "is not the headline" in p for p in problems)


def test_check_folder_name(good_folder, tmp_path):
    copy = tmp_path / TRACK / "Tiny_CPU_smoke"
    shutil.copytree(good_folder, copy)
    problems = problems_of(copy)
    assert problems == ["folder name 'Tiny_CPU_smoke' is not <YYYY-MM-DD>_<Name>"]


def test_check_command_line_prints_one_line_per_problem(bad_folder):
    (bad_folder / "README.md").unlink()
    (bad_folder / "train_seed42.log").rename(bad_folder / "train_seed7.log")
    result = subprocess.run([sys.executable, "-m", "records.make", "check", "--skip-import-check", str(bad_folder)],
                            cwd=REPO, env=run_env({}), capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    assert result.stdout.splitlines() == ["missing required file README.md",
                                          "train_seed7.log: misnamed log: it ran seed 42 (name it train_seed42.log)"]


def test_check_readable_file_must_strip_to_the_packed_source(bad_folder):
    readable = bad_folder / "train_gpt_readable.py"
    text = readable.read_text(encoding="utf-8").replace("\nimport numpy as np\n", "\nimport numpy as np  # same\n")
    readable.write_text(text, encoding="utf-8")  # a comment more on a line: the same stripped source
    assert not [p for p in problems_of(bad_folder) if "train_gpt_readable.py" in p]
    readable.write_text(readable.read_text(encoding="utf-8") + "VALUE = 1\n", encoding="utf-8")
    assert "train_gpt_readable.py does not give the source packed in train_gpt.py (strip_source of it differs): " \
           "not the file that was packed" in problems_of(bad_folder)
    readable.unlink()
    assert "missing train_gpt_readable.py: the readable source of the packed train_gpt.py" in problems_of(bad_folder)


def test_run_command_names_no_paths_of_the_machine_that_ran():
    """The shipped folder's README once gave DATA_PATH=/work/main/.carry/wiki1024: a path of the GPU machine."""
    from records.make import run_command
    run = parse_log_text("code_sha256:%s\nconfig:data_path=/work/main/.carry/wiki1024\nconfig:tokenizer_path="
                         ".carry/sp1024.model\nconfig:seed=42\nconfig:run_id=s42\nseed:42\n" % ("0" * 64))
    command = run_command(run, {"data_path": "./data/datasets/fineweb10B_sp1024"})
    assert "DATA_PATH=./data/datasets/wiki1024 " in command and "TOKENIZER_PATH=./data/tokenizers/sp1024.model" \
        in command and ".carry" not in command, command
    shipped = (REPO / "records").glob("track_*/*/README.md")
    for readme in shipped:
        text = readme.read_text(encoding="utf-8")
        assert not re.search(r"\.carry|/work/|/root/|/home/", text), readme


def test_every_shipped_record_folder_passes_check():
    """The folders in records/ pass the check of today's tool (one packed before comments were stripped is its own
    readable file: records.pack unpack gives it)."""
    folders = sorted(path for path in (REPO / "records").glob("track_*/*") if path.is_dir())
    assert folders
    for folder in folders:
        result = subprocess.run([sys.executable, "-m", "records.make", "check", "--skip-import-check", str(folder)],
                                cwd=REPO, env=run_env({}), capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stdout + result.stderr


# ---- the tracks' rules ----
def as_8xh100(text: str) -> str:
    """A log as an 8xH100 run writes it: nvidia-smi's 8 H100 rows and world size 8 (the rest of the run unchanged)."""
    cut = text.index(SOURCE_END)
    return text[:cut] + text[cut:].replace("nvidia-smi: not available\n", NVIDIA_SMI, 1).replace(
        "world_size:1 grad_accum_steps:8", "world_size:8 grad_accum_steps:1", 1)


def record_track_folder(complete_logs, baseline_dir, out: Path) -> Path:
    """The two tiny runs as 8xH100 logs, made into the record track with a significance test against the baseline."""
    logs = []
    for seed, path in complete_logs.items():
        logs.append(out / "in" / path.name)
        logs[-1].parent.mkdir(parents=True, exist_ok=True)
        logs[-1].write_text(as_8xh100(path.read_text(encoding="utf-8")), encoding="utf-8")
    rc, folder = make_record(out, logs, "--track", "track_10min_16mb", "--baseline", str(baseline_dir),
                             "--allow-baseline-mismatch")
    assert rc == 0 and folder.is_dir()
    return folder


def test_a_cpu_run_is_refused_for_the_record_track_naming_each_rule(complete_logs, tmp_path, capsys):
    """A CPU run (hardware "CPU (no GPU)") made into records/track_10min_16mb/ used to pass: the challenge asks for
    10 minutes on 8xH100 and a p < 0.01 improvement of 0.005 nats."""
    rc, folder = make_record(tmp_path / "out", complete_logs.values(), "--track", "track_10min_16mb")
    out = capsys.readouterr().out
    assert rc == 2 and not (tmp_path / "out").exists(), out
    for seed in SEEDS:
        assert "rec_seed%d.txt: breaks the track_10min_16mb rule 'train and evaluate on 8xH100': it ran on CPU (no " \
               "GPU)" % seed in out
    assert "breaks the track_10min_16mb rule 'beat the previous record by >= 0.005 nats at p < 0.01': no " \
           "significance test against the previous record" in out


def test_check_names_each_record_track_rule_a_log_breaks(complete_logs, baseline_dir, tmp_path):
    folder = record_track_folder(complete_logs, baseline_dir, tmp_path)
    problems, notes = check_folder(folder, run_import=False, python310=None)
    assert problems == [] and not [note for note in notes if "track" in note], (problems, notes)
    log = folder / "train_seed42.log"
    text = log.read_text(encoding="utf-8")
    step_avg = parse_log(log).step_avg_ms
    over = re.sub(r"(?m)^(step:6/6 (?:train|val)_loss:\S+ (?:val_bpb:\S+ )?)train_time:\d+ms", r"\1train_time:718391ms",
                  text)
    over = re.sub(r"(?m)^eval_time:\d+ms \(", "eval_time:600001ms (", over)
    log.write_text(over.replace("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB"), encoding="utf-8")
    problems = problems_of(folder)
    assert problems == [
        "train_seed42.log: breaks the track_10min_16mb rule 'train and evaluate on 8xH100': it ran on 8×NVIDIA "
        "A100-SXM4-80GB (world size 8)",
        "train_seed42.log: breaks the track_10min_16mb rule 'training <= 600 s': train_time 718391 ms (the cap allows "
        "one step past 600 s, %.0f ms here)" % parse_log(log).step_avg_ms,
        "train_seed42.log: breaks the track_10min_16mb rule 'evaluation <= 600 s': its evaluation took 600001 ms"], \
        problems
    assert step_avg > 0
    submission = json.loads((folder / "submission.json").read_text())
    submission["baseline"]["p_value"] = 0.02
    (folder / "submission.json").write_text(json.dumps(submission))
    log.write_text(text, encoding="utf-8")
    assert problems_of(folder) == ["breaks the track_10min_16mb rule 'beat the previous record by >= 0.005 nats at "
                                   "p < 0.01': p = 0.02 against %s" % baseline_dir]


def test_a_non_record_track_says_what_it_is_and_an_unknown_track_is_a_problem(good_folder, tmp_path):
    problems, notes = check_folder(good_folder, run_import=False, python310=None)
    assert problems == [] and notes[0].startswith("track_non_record_16mb is a non-record track: of the challenge's "
                                                  "rules only the 16,000,000-byte limit applies (checked)"), notes
    copy = tmp_path / "track_10min" / good_folder.name
    shutil.copytree(good_folder, copy)
    assert problems_of(copy) == ["track 'track_10min': not a track this check knows: track_10min_16mb (the record "
                                 "track) or a non-record track, whose name says non_record"]


# ---- a resumed run: one run in slices ----
def sliced(text: str, at_step: int, checkpoint: str = "logs/rec/checkpoints/step_%d", resume_settings: dict = None
           ) -> str:
    """The log of the same run stopped after step `at_step` (CHECKPOINT_ON_SIGNAL=1 saves its checkpoint) and
    resumed from it with RESUME=latest: the first launch's lines up to that step, `checkpoint:` and `stopped:` lines,
    then the second launch appended as the trainer writes it (docs/checkpoint.md): the header again, a `resume:`
    line, the steps after the checkpoint and the end of the run."""
    folder = checkpoint % at_step
    first_step = text.index("\nstep:1/") + 1
    cut = text.index("\n", text.index("\nstep:%d/6 val_loss" % at_step) + 1) + 1
    train_ms = re.search(r"step:%d/6 val_loss:\S+ val_bpb:\S+ train_time:(\d+)ms" % at_step, text).group(1)
    header = text[:first_step].replace("\nconfig:resume=\n", "\nconfig:resume=latest\n")
    for name, value in (resume_settings or {}).items():
        header = re.sub(r"(?m)^config:%s=.*$" % name, "config:%s=%s" % (name, value), header)
    return (text[:cut] + "checkpoint: step:%d/6 train_time:%sms path:%s\n" % (at_step, train_ms, folder)
            + "stopped: SIGTERM at 2026-11-29T00:00:00 UTC, step:%d/6 train_time:%sms; checkpoint %s\n"
            % (at_step, train_ms, folder) + header + "resume: step:%d/6 train_time:%sms from:%s\n"
            % (at_step, train_ms, folder) + text[cut:])


def test_a_resumed_run_is_one_run_in_slices_and_make_shows_them(complete_logs, tmp_path, capsys):
    """`RESUME=latest` appends the next slice to the run's own log: that is one run (make refused it as 'holds 2
    runs'); the README and submission.json show the slices."""
    path = tmp_path / "rec_seed1337.txt"
    path.write_text(sliced(complete_logs[1337].read_text(encoding="utf-8"), 3), encoding="utf-8")
    run, whole = parse_log(path), parse_log(complete_logs[1337])
    assert run.run_count == 1 and len(run.slices) == 2
    assert (run.exact, run.steps, run.config) == (whole.exact, whole.steps, whole.config)
    assert [step for step, _ in run.train_curve] == [1, 2, 3, 4, 5, 6]
    rc, folder = make_record(tmp_path / "out", [path, complete_logs[42]])
    assert rc == 0, capsys.readouterr()
    readme = (folder / "README.md").read_text()
    assert "## Slices" in readme and "`train_seed1337.log`, one run in 2 slices:" in readme
    assert "slice 2: resumed from logs/rec/checkpoints/step_3: steps 3-6" in readme
    seeds = {seed["seed"]: seed for seed in json.loads((folder / "submission.json").read_text())["seed_results"]}
    seed = seeds[1337]
    assert seeds[42]["slices"] == [] and len(seed["slices"]) == 2 and seed["slices"][0].startswith("slice 1: steps 0-3")


def test_two_different_runs_in_one_log_are_still_refused(complete_logs, tmp_path, capsys):
    text = complete_logs[1337].read_text(encoding="utf-8")
    cases = {
        "other_settings": (sliced(text, 3, resume_settings={"matrix_lr": "0.03"}),
                           "rec_seed1337.txt: slice 2 trains with other settings than slice 1 (MATRIX_LR=0.03 (slice "
                           "1: 0.025)): not one run"),
        "unsaved_checkpoint": (sliced(text, 3).replace("checkpoint: step:3/6", "checkpoint: step:2/6"),
                               "rec_seed1337.txt: slice 2 resumes from logs/rec/checkpoints/step_3 (step 3), a "
                               "checkpoint no earlier slice of this log saved"),
        "appended": (text + text, "rec_seed1337.txt: holds 2 runs")}
    for name, (log, message) in cases.items():
        path = tmp_path / name / "rec_seed1337.txt"
        path.parent.mkdir()
        path.write_text(log, encoding="utf-8")
        rc, folder = make_record(tmp_path / name / "out", [path])
        out = capsys.readouterr().out
        assert rc == 2 and not folder.exists() and message in out, (name, out)


def test_make_help_names_every_file_it_writes_and_one_seed_is_one_seed(good_folder, complete_logs, tmp_path):
    shown = subprocess.run([sys.executable, "-m", "records.make", "--help"], cwd=REPO, env=run_env({}),
                           capture_output=True, text=True, timeout=120)
    written = sorted(path.name for path in good_folder.iterdir() if not path.name.startswith("train_seed"))
    assert written and all(re.search(r"(?m)^  %s " % re.escape(name), shown.stdout) for name in written), (
        written, shown.stdout)
    assert re.search(r"(?m)^  train_seed<N>\.log ", shown.stdout)
    docs = (REPO / "docs" / "records.md").read_text(encoding="utf-8")
    assert all("`%s`" % name in docs for name in written), written  # the docs said: no second copy of the source
    rc, folder = make_record(tmp_path, [complete_logs[42]])
    assert rc == 0
    assert "; 1 seed on " in json.loads((folder / "submission.json").read_text())["blurb"]
