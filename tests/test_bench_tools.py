"""The GPU benchmark tools' own logic, checked on the CPU: step_time's NCCL overlap arithmetic is exact, its train
table reports what the logs say and its floor variants remove only the component they name; gptq_solve times every
record shape; eval_speed's estimate simulates the phased TTT's schedule."""
import re
import subprocess
import sys
import time
from types import SimpleNamespace

import numpy as np
import pytest

from tgpt_util import REPO, TINY_0427_ENV, TINY_MODEL_ENV, run_env, tgpt, write_shard  # noqa: F401 (fixture)

sys.path.insert(0, str(REPO / "bench"))
from step_time import family, overlap_report, step_flops  # noqa: E402


def kernel(name, start, end):
    return SimpleNamespace(name=name, time_range=SimpleNamespace(start=start, end=end))


def test_overlap_report_counts_only_time_under_compute_kernels():
    events = [kernel("gemm_a", 0, 100), kernel("triton_b", 90, 130), kernel("gemm_c", 150, 200),
              kernel("ncclDevKernel_AllGather(x)", 120, 160),  # 10 us under triton_b, 10 us under gemm_c
              kernel("ncclDevKernel_AllReduce(y)", 210, 240)]  # nothing runs beside it
    report = overlap_report(events, steps=1).splitlines()
    assert report[0] == "NCCL kernel time 0.070 ms/step, of which 0.020 ms (28.6%) overlapped compute kernels"
    assert "ncclDevKernel_AllGather" in report[1] and "hidden  50.0%" in report[1]
    assert "ncclDevKernel_AllReduce" in report[2] and "hidden   0.0%" in report[2]
    assert overlap_report([kernel("gemm", 0, 1)], steps=1).startswith("no NCCL kernels")


def test_kernel_families():
    assert family("cudnn_generated_fort_native_sdpa_sm90_flash_bprop") == "attention"
    assert family("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT") == "gemm"
    assert family("triton_poi_fused__to_copy_leaky_relu_pow_21") == "triton"
    assert family("_qkv_heads_bwd") == family("_qk_norm_rope_bwd") == "qkv kernel"
    assert family("_xsa_fwd") == family("_xsa_bwd_0") == "xsa kernel"
    assert family("_mlp_up_act_fwd_0") == family("_mlp_act_grad_bwd") == "mlp kernel"
    assert family("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL") == "nccl"


# One optimizer step = 8 micro-steps; a linear map of m inputs to n outputs on N tokens costs 2 m n N FLOPs forward
# and twice that backward (the input's and the weight's gradient): 6 m n per token per step. A causal attention piece
# of L tokens has L^2/2 (query, key) pairs, 2 D FLOPs each for the scores and 2 D for the values, per query head,
# forward; backward twice that. Written from the architecture (SPEC, SPEC_0409, SPEC_0427), not from step_flops.
def linear_flops(tokens, *shapes):
    return sum(6 * m * n * tokens for m, n in shapes)


def causal_attention_flops(rows, length, heads, head_dim):
    return 3 * 4 * head_dim * heads * rows * length * length / 2


def test_step_flops_match_a_hand_count_of_the_2026_03_23_model():
    """TINY_MODEL_ENV (the 03-23 architecture, 4 blocks of d 64): per block the q, k, v, o projections (k and v to
    the 2 KV heads' 32 dims) and the MLP (d -> 3d -> d), the tied head (d -> vocab), the bigram and value-embedding
    projections (16 -> d, 16 -> 32, the value embedding computed once), causal attention on rows of 64; no looping,
    so both counts are the same."""
    d, kv, tokens, seq, heads = 64, 32, 4096, 64, 4
    block = linear_flops(tokens, (d, d), (d, kv), (d, kv), (d, d), (d, 3 * d), (3 * d, d))
    attention = 4 * causal_attention_flops(tokens // seq, seq, heads, d // heads)
    expected = 4 * block + linear_flops(tokens, (d, 1024), (16, d), (16, kv)) + attention
    counts = step_flops(TINY_MODEL_ENV)
    assert counts[False] == counts[True] == (expected, attention)
    assert (counts["tokens"], counts["piece"], counts["piece_from"]) == (4096, 64, "dense")
    assert step_flops(dict(TINY_MODEL_ENV, NUM_LAYERS="5", VE_LAYERS="3,4"))[False][0] == expected + block + \
        causal_attention_flops(tokens // seq, seq, heads, d // heads)


def test_step_flops_of_the_2026_04_27_model_and_its_looping():
    """TINY_0427_ENV: 6 blocks (MLP d -> 4d -> d, no bigram or value embedding), per block call also the sparse
    attention gate (12 leading dims -> one logit per head), the SmearGate (12 dims -> 1, on every token but a row's
    first: one packed row of 512 tokens per micro-step); attention on pieces of L_eff = 16 tokens (a flag) costs
    6 N H D L_eff. Looping runs blocks 2-3 three times: 4 block calls more, and exactly their FLOPs more."""
    d, kv, tokens, heads = 64, 32, 4096, 4
    attention = 6 * tokens * heads * (d // heads) * 16
    block = linear_flops(tokens, (d, d), (d, kv), (d, kv), (d, d), (d, 4 * d), (4 * d, d), (12, heads)) + attention
    head_and_gate = linear_flops(tokens, (d, 1024)) + linear_flops(8 * 511, (12, 1))
    counts = step_flops(TINY_0427_ENV, piece_tokens=16)
    assert counts[False] == (6 * block + head_and_gate, 6 * attention)
    extra_calls = 2 * (3 - 2 + 1)  # NUM_LOOPS x the blocks LOOP_START..LOOP_END
    assert counts[True] == (counts[False][0] + extra_calls * block, counts[False][1] + extra_calls * attention)
    assert (counts["piece"], counts["piece_from"]) == (16, "assumed")


def test_step_flops_measure_the_document_pieces_on_shards(tmp_path):
    """TRAIN_LOADER=documents with a DATA_PATH: L_eff from the rows the loader cuts. Documents of 100 tokens (BOS
    first), rows of 512 tokens every 513 (a micro-step's span has one target more), pieces of <= 64 tokens counted
    from each document's start or the row's: row 1 has five documents (64 + 36 each) and 12 tokens of a sixth; row 2
    starts 13 tokens before a BOS, so 87 tokens (64 + 23), four documents, 25 tokens. Without data, every piece is
    TRAIN_SEQ_LEN long."""
    tokens = np.tile(np.r_[1, 2 + np.arange(99) % 50], 11)
    write_shard(tmp_path / "fineweb_train_000000.bin", tokens[:1030])
    pieces = [64, 36] * 5 + [12] + [64, 23] + [64, 36] * 4 + [25]
    assert sum(pieces) == 1024
    counts = step_flops(dict(TINY_0427_ENV, DATA_PATH=str(tmp_path)))
    assert counts["piece"] == pytest.approx(sum(p * p for p in pieces) / 1024, rel=1e-12)
    assert counts["piece_from"] == "measured on " + str(tmp_path)
    assert counts[False][1] == pytest.approx(6 * 6 * 4096 * 4 * 16 * counts["piece"], rel=1e-12)
    assert step_flops(dict(TINY_0427_ENV, DATA_PATH=str(tmp_path / "none")))["piece"] == 64


FAKE_TRAINER = '''import os, sys, time
steps = int(os.environ["ITERATIONS"])
assert os.environ["MAX_WALLCLOCK_SECONDS"] == "0" and os.environ["VAL_LOSS_EVERY"] == "0"
print("data_path:%s recipe:%s" % (os.environ.get("DATA_PATH"), os.environ.get("RECIPE")))
print("attention_backend:cudnn (fastest probe) torch_compile:True")
print("qk_kernel:triton (auto)")
for step in range(10, steps + 1, 10):  # 600 ms per step up to step 20, 900 after (looping on)
    print("step:%d/%d train_loss:%.4f train_time:%dms step_avg:%.2fms" % (
        step, steps, 6 - step / 100 + (os.environ.get("TRAIN_PREFETCH") == "0") / 1e4,  # another data path
        600 * min(step, 20) + 900 * max(step - 20, 0), 600 + step / 10))
    if step == 20:
        print("layer_loop:enabled step:20 frac:0.667 encoder:[0, 1] decoder:[1, 2]")
print("step:%d/%d val_loss:2.4000 val_bpb:1.4321 train_time:%dms step_avg:602.50ms" % (steps, steps, steps * 600))
print("data_wait total_ms:12.0 per_step_ms:0.480 fraction_of_train_time:0.00080")
print("peak memory allocated: 20160 MiB", flush=True)
time.sleep(120)  # the end-of-run evals: step_time.py must stop the run here
'''


def test_step_time_table_reads_the_logs_and_stops_each_run(tmp_path):
    """bench/step_time.py train on a stand-in script that prints the challenge's log lines: the last train step_avg,
    peak memory, data wait, the final val bpb, the chosen losses, the mean ms/step in windows, the ratio to the first
    row and the kernels; then per window (0: = all steps) the FLOPs per step, pre-loop or looped after the logged
    looping step or their mix, and the MFU against the spec and the given matmul rate; a recipe preset sets its
    RECIPE and data; the run is stopped at its peak-memory line instead of waiting for the evals."""
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)
    (tmp_path / "sp8192").mkdir()
    (tmp_path / "sp8192.model").write_text("")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, str(REPO / "bench" / "step_time.py"), "train", "--script", str(script),
                           "--steps", "30", "--loss-at", "10", "30", "--out-dir", str(tmp_path / "logs"),
                           "--config", "record:", "--config", "small:TRAIN_BATCH_TOKENS=393216", "--config", "0409",
                           "--sp8192", str(tmp_path / "sp8192"), "--sp8192-tokenizer", str(tmp_path / "sp8192.model"),
                           "--window", "10:20", "--window", "20:", "--matmul-tflops", "800"],
                          capture_output=True, text=True, timeout=200)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert time.monotonic() - start < 100
    rows, windows = {}, {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if parts and parts[0].endswith("fake_train.py"):  # table rows (progress lines start with "==")
            rows[parts[1]] = parts
        elif len(parts) > 8 and parts[2] in ("0:", "10:20", "20:"):  # the FLOPs table
            windows[parts[0], parts[2]] = parts[3:8]
    record, small, recipe = rows["record"], rows["small"], rows["0409"]
    assert record[2] == small[2] == "1"  # nproc
    assert record[3] == small[3] == "603.00"  # the last train step line's step_avg
    assert record[4] == "%.0f" % (786432 / 0.603) and small[4] == "%.0f" % (393216 / 0.603)
    assert record[5:] == ["20160", "0.480", "1.4321@30", "5.9000/5.7000", "30", "20", "600.00", "900.00", "1.000",
                          "attn=cudnn", "qk=triton"]
    plain, looped = step_flops({}), step_flops({"RECIPE": "2026-04-09"})
    assert step_flops({"TRAIN_BATCH_TOKENS": "393216"})[False][0] * 2 == plain[False][0]

    def row(counts, ms, flops=None):  # looping from logged step 20: 0:30 has 20 steps before, 10 after
        flops = flops or counts[False]
        return ["%.2f" % ms, "%.5g" % flops[0], "%.2f" % (100 * flops[1] / flops[0]),
                "%.1f" % (flops[0] / ms / 989 / 1e7), "%.1f" % (flops[0] / ms / 800 / 1e7)]
    assert windows["record", "20:"] == row(plain, 900) and windows["small", "0:"][1] == "%.5g" % (plain[False][0] / 2)
    assert windows["0409", "10:20"] == row(looped, 600) and windows["0409", "20:"] == row(looped, 900, looped[True])
    mix = tuple((20 * a + 10 * b) / 30 for a, b in zip(looped[False], looped[True]))
    assert windows["0409", "0:"] == row(looped, 603, mix) and looped[True][0] > 1.4 * looped[False][0]
    log_lines = (tmp_path / "logs" / "fake_train__small__1.log").read_text().splitlines()
    assert sum(line.startswith("step:") for line in log_lines) == 4
    preset_log = (tmp_path / "logs" / "fake_train__0409__1.log").read_text()
    assert "data_path:%s recipe:2026-04-09" % (tmp_path / "sp8192") in preset_log


def test_the_harness_reads_the_lines_the_trainer_writes():
    """harness.parse_log_line against train_gpt.py's own format strings (read from its source and filled in), so a
    changed log line fails here instead of leaving a benchmark's table empty on a GPU."""
    import harness
    source = (REPO / "train_gpt.py").read_text(encoding="utf-8")

    def line(prefix, *values):
        formats = re.findall(r'"(%s[^"]*)"' % re.escape(prefix), source)
        assert len(set(formats)) == 1, (prefix, formats)
        return formats[0] % values
    result = {"step_avg": None, "steps": 0, "peak_mib": None, "wait_ms": None, "wait_fraction": None, "loss": {},
              "train_ms": {}, "val": {}, "loop_step": None, "kernels": {}, "errors": []}
    for text in (line("step:%d/%d train_loss", 20, 200, 3.25, 12000.0, 600.0),
                 line("step:%d/%d val_loss", 200, 200, 2.5, 1.375, 120000.0, 600.0),
                 line("layer_loop:enabled", 70, 0.35, [0, 1], [2, 3]),
                 line("data_wait total_ms", 96.0, 0.48, 0.0008),
                 line("peak memory allocated", 20160, 21000),
                 line("qk_kernel:", "triton", "auto"), line("attention_backend:", "cudnn", "probe", True),
                 "error: DATA_PATH=x: no such directory"):
        harness.parse_log_line(result, text + "\n")
    assert (result["steps"], result["step_avg"], result["loss"], result["train_ms"]) == (20, 600.0, {20: "3.2500"},
                                                                                          {20: 12000.0})
    assert result["val"] == {200: ("2.5000", "1.3750")} and result["loop_step"] == 70
    assert (result["wait_ms"], result["wait_fraction"], result["peak_mib"]) == (0.48, 0.0008, 20160)
    assert result["kernels"] == {"qk": "triton", "attn": "cudnn"}
    assert result["errors"] == ["error: DATA_PATH=x: no such directory"]


def test_step_time_exits_1_when_a_data_path_changes_the_losses(tmp_path):
    """--expect-same-losses: a control run (a config given twice, suffixed) must repeat the first run's losses, and
    so must every other data path; the stand-in's losses move at TRAIN_PREFETCH=0, so p0_c1 is named and the call
    fails, while p1_c1 twice and p1_c0 pass."""
    script = tmp_path / "fake_train.py"
    script.write_text(FAKE_TRAINER)

    def run(*configs):
        command = [sys.executable, str(REPO / "bench" / "step_time.py"), "train", "--script", str(script), "--steps",
                   "20", "--out-dir", str(tmp_path / "logs"), "--expect-same-losses"]
        return subprocess.run(command + [arg for config in configs for arg in ("--config", config)],
                              capture_output=True, text=True, timeout=100)
    same = run("p1_c1", "p1_c1", "p1_c0")
    assert same.returncode == 0, same.stdout[-2000:] + same.stderr[-2000:]
    assert (tmp_path / "logs" / "fake_train__p1_c1_1__1.log").is_file()  # the control run's own log
    changed = run("p1_c1", "p0_c1")
    assert changed.returncode == 1 and "losses differ from the first run's: ['p0_c1']" in changed.stdout


def test_gptq_solve_bench_times_every_record_shape(tmp_path):
    """bench/gptq_solve.py on the CPU with one layer: a row per record shape, and a total that is the sum of the
    per-model seconds (calls x the median time per call)."""
    out = subprocess.run([sys.executable, str(REPO / "bench" / "gptq_solve.py"), "--layers", "1", "--repeats", "1"],
                         cwd=tmp_path, env=run_env({}), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    rows = [line.split() for line in lines[2:-1]]
    assert [row[0] for row in rows] == ["attn.c_q", "attn.c_k", "attn.c_v", "attn.proj", "mlp.fc", "mlp.proj",
                                        "tok_emb"]
    assert [row[1] for row in rows] == ["512x512", "256x512", "256x512", "512x512", "2048x512", "512x2048",
                                        "8192x512"]
    assert all(row[4] == "1" and float(row[3]) > 0 for row in rows)
    total = float(lines[-1].split(":")[1])
    assert abs(total - sum(float(row[5]) for row in rows)) < 0.01 + 0.005 * len(rows)


def test_eval_speed_estimate_simulates_the_trainers_schedule_and_the_phase_barrier(tgpt, tmp_path):
    """bench/eval_speed.py estimate's schedule by hand: EVAL_SEQ_LEN 128 and 16-token chunks give steps of row length
    64 (chunk ends <= 64: 1 s) then 128 (2 s); a batch whose longest document has 100 tokens runs 4 + 3 steps (10 s),
    one of 48 tokens 3 steps (3 s). Boundary 4 is reached by queue batch 1; with the W - 1 = 1 batch the other rank
    holds, the phase comes after batch 2. Before it, batches go to the rank whose batches cost least so far (these
    short steps all cost the trainer's floor: cost = steps): 0 to rank 0, 1 and 2 to rank 1; the phase waits for the
    slower rank (10 s), then all run 5 SGD chunks of 4 s; batch 3 goes to rank 0 (3 s). Without a phase, batch 3 goes
    to rank 1 (6 < 7 steps). With 2-row timings (half the cost) in the cost file, a step runs the trainer's rows: the
    batch of 10- and 100-token documents, 2 rows throughout, costs half. The record's logs give 782 batches, the
    longest first, 50,000 documents."""
    import eval_speed as estimate
    h = tgpt.Hyperparameters.from_env(dict(TINY_0427_ENV, EVAL_SEQ_LEN="128", TTT_LORA_CHUNK="16"))
    cost = {"doc_batch": 64, "lora_step_ms": {"64": 1000.0, "128": 2000.0}, "sgd_ms": {"2": 4000.0}}
    batches, five = [[100, 100], [48, 48], [48, 48], [48, 48]], lambda phases: [5] * len(phases)
    row = estimate.simulate(tgpt, h, batches, [4], five, cost, 2)
    assert row["phases"] == [(3, 4)]
    assert row["rank_busy_s"] == [13.0, 6.0] and row["loop_s"] == 10 + 20 + 3
    assert row["longest_batch_s"] == 10 and row["sgd_s"] == 20
    no_phase = estimate.simulate(tgpt, h, batches, [], five, cost, 2)
    assert no_phase["loop_s"] == 10 and no_phase["rank_busy_s"] == [10.0, 9.0]
    with pytest.raises(SystemExit, match="no SGD step time for world size 4"):
        estimate.simulate(tgpt, h, batches, [4], five, cost, 4)
    half = dict(cost, lora_step_ms_rows_2={"64": 500.0, "128": 1000.0})
    assert estimate.simulate(tgpt, h, [[10, 100]], [], five, half, 2)["loop_s"] == 5  # 2 rows: 4 x 0.5 + 3 x 1 s
    assert estimate.simulate(tgpt, h, [[10, 100]], [], five, cost, 2)["loop_s"] == 10
    log = tmp_path / "record.log"
    log.write_text("ttp: b782/782 bl:2.1 dl:30339-97114 gd:0\nttp: b1/782 bl:2.7 dl:2-105 gd:1\n"
                   "ttp: b392/782 dl:500-510 gd:1\n")
    record = estimate.record_batches([str(log)])
    assert len(record) == 782 and (len(record[0]), record[0][0], record[0][-1]) == (16, 30339, 97114)
    assert (len(record[-1]), record[-1][0], record[-1][-1]) == (64, 2, 105)
    assert sum(map(len, record)) == 50_000 and (record[782 - 392][0], record[782 - 392][-1]) == (500, 510)
    assert all(a[-1] >= b[-1] and a == sorted(a) for a, b in zip(record, record[1:]))  # interpolated, longest first
