"""Trainer core: configuration, model fidelity, optimizer math, data reader errors, training runs (1 and 2 ranks)."""
import ast
import dataclasses
import os
import re
import subprocess
import sys

import pytest
import torch

from tgpt_util import REPO, TINY_MODEL_ENV, run_env, tgpt, tiny_data, tiny_data_short_val  # noqa: F401 (fixtures)


# ---- configuration ----
def test_defaults_are_the_record_run(tgpt):
    h = tgpt.Hyperparameters()
    assert (h.num_layers, h.model_dim, h.num_heads, h.num_kv_heads, h.mlp_mult) == (11, 512, 8, 4, 3.0)
    assert (h.bigram_vocab_size, h.xsa_last_n, h.rope_dims, h.ve_layers) == (1536, 4, 16, "9,10")
    assert (h.iterations, h.warmdown_iters, h.max_wallclock_seconds, h.train_batch_tokens) == (9000, 3500, 600.0, 786432)
    assert (h.matrix_lr, h.scalar_lr, h.tied_embed_lr, h.muon_wd, h.adam_wd) == (0.025, 0.025, 0.035, 0.04, 0.04)
    assert (h.ema_enabled, h.ema_decay, h.swa_enabled, h.late_qat_threshold) == (True, 0.997, False, 0.15)


def test_env_parsing_types_and_names(tgpt):
    h = tgpt.Hyperparameters.from_env({"NUM_LAYERS": "6", "MLP_MULT": "2.5", "TIE_EMBEDDINGS": "false",
                                       "RUN_ID": "abc", "VE_LAYERS": "4,5"})
    assert (h.num_layers, h.mlp_mult, h.tie_embeddings, h.run_id) == (6, 2.5, False, "abc")
    assert tgpt.Hyperparameters.from_env({}).run_id  # a fresh uuid when unset


def test_every_bad_value_is_reported_at_once_with_name_value_and_expectation(tgpt):
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"NUM_LAYERS": "eleven", "TIE_EMBEDDINGS": "maybe", "MATRIX_LR": "nan"})
    message = str(info.value)
    assert len(info.value.errors) == 3
    assert "NUM_LAYERS='eleven': expected an integer" in message
    assert "TIE_EMBEDDINGS='maybe': expected 0/1/true/false" in message
    assert "MATRIX_LR='nan'" in message


def test_cross_field_errors_are_collected(tgpt):
    with pytest.raises(tgpt.ConfigError) as info:
        tgpt.Hyperparameters.from_env({"MODEL_DIM": "500", "NUM_KV_HEADS": "3", "EMA_DECAY": "1.5",
                                       "VE_LAYERS": "3,99", "ATTN_BACKEND": "fast"})
    text = "\n".join(info.value.errors)
    for needle in ("MODEL_DIM=500 must be divisible by NUM_HEADS=8", "NUM_HEADS=8 must be a multiple of NUM_KV_HEADS=3",
                   "EMA_DECAY=1.5", "VE_LAYERS='3,99'", "ATTN_BACKEND='fast'"):
        assert needle in text
    with pytest.raises(tgpt.ConfigError, match="head dim MODEL_DIM/NUM_HEADS=9 must be even"):
        tgpt.Hyperparameters.from_env({"MODEL_DIM": "72", "NUM_HEADS": "8"})


def test_world_size_and_batch_divisibility(tgpt):
    h = tgpt.Hyperparameters()
    for world in (1, 2, 4, 8):
        h.validate_for_world(world)
    with pytest.raises(tgpt.ConfigError, match="WORLD_SIZE=3 must divide 8"):
        h.validate_for_world(3)
    bad = tgpt.Hyperparameters.from_env({"TRAIN_BATCH_TOKENS": "786436"})
    with pytest.raises(tgpt.ConfigError, match="TRAIN_BATCH_TOKENS=786436 must be divisible"):
        bad.validate_for_world(8)
    bad = tgpt.Hyperparameters.from_env({"TRAIN_BATCH_TOKENS": "8192", "VAL_BATCH_SIZE": "1024"})
    with pytest.raises(tgpt.ConfigError) as info:
        bad.validate_for_world(1)
    assert len(info.value.errors) == 2  # both the train and the val batch problem, in one report


def test_unknown_env_that_looks_like_ours_is_flagged(tgpt):
    warnings = tgpt.suspicious_env_names({"LATE_QAT": "1", "MUON_BETA2": "0.95", "EMA_DECAY": "0.99",
                                          "NUM_LAYER": "9", "HOME": "/root", "PATH": "/bin"})
    joined = "\n".join(warnings)
    assert "LATE_QAT=1 is not a setting of this script and is IGNORED" in joined
    assert "MUON_BETA2=0.95" in joined
    assert "NUM_LAYER=9" in joined and "did you mean NUM_LAYERS?" in joined
    assert "EMA_DECAY" not in joined and "HOME" not in joined and "PATH" not in joined


# ---- import hygiene and Python 3.10 ----
def test_parses_with_python_310_grammar():
    ast.parse((REPO / "train_gpt.py").read_text(encoding="utf-8"), feature_version=(3, 10))


def test_the_trainer_keeps_its_shape():
    """STYLE: one file of at most 3,800 lines with all three recipes, no line over 120 characters."""
    lines = (REPO / "train_gpt.py").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 3800, len(lines)
    assert [number for number, line in enumerate(lines, 1) if len(line) > 120] == []


def test_import_has_no_side_effects(tmp_path):
    probe = r"""
import os, socket, sys, torch, torch.distributed as dist
import torch.distributed.elastic.multiprocessing.errors  # torch's own env reads (LOGLEVEL) happen here, not ours
try:
    import triton, triton.language  # likewise Triton's (HOME, TRITON_*), where it is installed
except ImportError:
    pass
try:  # and dynamo's config (read when the optional document-attention modules are imported)
    import torch.nn.attention.varlen, torch.nn.attention.flex_attention
except ImportError:
    pass
reads = []
class Recorder(dict):
    def __getitem__(self, k): reads.append(k); return dict.__getitem__(self, k)
    def get(self, k, d=None): reads.append(k); return dict.get(self, k, d)
    def __contains__(self, k): reads.append(k); return dict.__contains__(self, k)
def no_network(*a, **k): raise AssertionError("network at import")
socket.socket.connect = no_network
os.environ = Recorder(os.environ)
sys.path.insert(0, sys.argv[1])
from tgpt_util import load_train_gpt
before = set(os.listdir("."))
module = load_train_gpt()
ours = [k for k in reads if k.upper() == k and not k.startswith(("TORCH", "PYTORCH", "CUDA", "NCCL", "OMP", "KINETO"))]
print("reads", ours, "cuda", torch.cuda.is_initialized(), "pg", dist.is_initialized(), "new", sorted(set(os.listdir(".")) - before))
"""
    out = subprocess.run([sys.executable, "-c", probe, str(REPO / "tests")], cwd=tmp_path, capture_output=True,
                         text=True, env=run_env({}), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "reads [] cuda False pg False new []" in out.stdout, out.stdout


# ---- model fidelity ----
def test_record_parameter_count_and_bank_shapes(tgpt):
    with torch.device("meta"):
        model = tgpt.GPT(tgpt.Hyperparameters())
    assert sum(p.numel() for p in model.parameters()) == 26_928_220
    assert tuple(model.qo_bank.shape) == (22, 512, 512) and tuple(model.kv_bank.shape) == (22, 256, 512)
    assert tuple(model.mlp_up_bank.shape) == (11, 1536, 512) and tuple(model.mlp_down_bank.shape) == (11, 512, 1536)
    assert [i for i, b in enumerate(model.blocks) if b.attn.use_xsa] == [7, 8, 9, 10]


def tiny_hparams(tgpt, **overrides):
    env = dict(TINY_MODEL_ENV, **{k.upper(): str(v) for k, v in overrides.items()})
    return tgpt.Hyperparameters.from_env(env)


def test_initialisation_follows_the_spec(tgpt):
    model = tgpt.build_model(tiny_hparams(tgpt), torch.device("cpu"))
    n = model.num_layers
    assert torch.count_nonzero(model.qo_bank[n:]) == 0 and torch.count_nonzero(model.mlp_down_bank) == 0
    assert torch.count_nonzero(model.bigram.embed.weight) == 0
    w_q = model.qo_bank[0]
    assert torch.allclose(w_q @ w_q.T, torch.eye(w_q.size(0)), atol=1e-5)  # orthogonal, gain 1
    assert model.bigram.scale.item() == pytest.approx(0.05) and model.ve_shared.scale.item() == pytest.approx(0.1)
    assert torch.equal(model.blocks[1].resid_mix[0], torch.ones(64)) and torch.count_nonzero(model.blocks[1].resid_mix[1]) == 0


def test_bigram_hash_matches_the_formula(tgpt):
    model = tgpt.build_model(tiny_hparams(tgpt), torch.device("cpu"))
    ids = torch.tensor([[5, 1023, 7, 0]])
    buckets = tgpt.bigram_buckets(ids, model.bigram.embed.num_embeddings)[0].tolist()
    mod = 128 - 1
    assert buckets == [mod, ((36313 * 1023) ^ (27191 * 5)) % mod, ((36313 * 7) ^ (27191 * 1023)) % mod,
                       ((36313 * 0) ^ (27191 * 7)) % mod]


def test_forward_is_causal(tgpt):
    model = tgpt.build_model(tiny_hparams(tgpt), torch.device("cpu"))
    with torch.no_grad():  # make every layer non-trivial (W_o and W_down start at zero)
        model.qo_bank.normal_(std=0.05)
        model.mlp_down_bank.normal_(std=0.05)
    ids = torch.randint(0, 1024, (2, 32))
    changed = ids.clone()
    changed[:, 20] = (changed[:, 20] + 1) % 1024
    with torch.no_grad():
        a, b = (model.logits_from_hidden(model.forward_hidden(tokens)) for tokens in (ids, changed))
    assert torch.equal(a[:, :20], b[:, :20])
    assert not torch.allclose(a[:, 20:], b[:, 20:])


def test_the_ln_scale_rounds_as_a_float_product_in_bf16(tgpt):
    """Block i's ln scale 1/sqrt(i + 1) (SPEC §4) is a 0-D buffer, so that one compiled block serves every layer:
    apply_dtype_recipe keeps it fp32 (model.bfloat16() alone would round it), and on bf16 activations scaled_norm
    equals rms_norm(x) times the Python float bit for bit, as the records compute it; a bf16 scale gives other values."""
    h = tgpt.Hyperparameters.from_env(TINY_MODEL_ENV)
    model = tgpt.apply_dtype_recipe(tgpt.GPT(h), h)
    x = torch.randn(2, 64, h.model_dim, generator=torch.Generator().manual_seed(0)).bfloat16()
    for i, block in enumerate(model.blocks):
        assert block.norm_factor.dtype == torch.float32 and block.norm_factor.dim() == 0
        assert torch.equal(block.scaled_norm(x), tgpt.rms_norm(x) * (1 / (i + 1) ** 0.5))
    assert not torch.equal(tgpt.rms_norm(x) * torch.tensor(3 ** -0.5).bfloat16(), tgpt.rms_norm(x) * 3 ** -0.5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_partial_rope_is_the_spec_rotation_bit_for_bit_forward_and_backward(tgpt, dtype):
    """apply_partial_rotary's one-expression form == SPEC §4's slice form (u' = u cos + w sin, w' = w cos - u sin,
    the other dims untouched), including the NTK-rescaled base at T = 2048, in values and in gradients."""
    seq_len, head_dim, rope_dims = 2048, 64, 16
    base = 10000.0 * (seq_len / 1024) ** (rope_dims / (rope_dims - 2))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32),
                         base ** (-torch.arange(0, rope_dims, 2, dtype=torch.float32) / rope_dims))
    cos, sin = angles.cos().to(dtype)[None, :, None, :], angles.sin().to(dtype)[None, :, None, :]
    x = torch.randn(2, seq_len, 3, head_dim, dtype=dtype, generator=torch.Generator().manual_seed(0),
                    requires_grad=True)
    grad = torch.randn(x.shape, dtype=dtype, generator=torch.Generator().manual_seed(1))
    u, w, rest = x[..., :8], x[..., 8:16], x[..., 16:]
    expected = torch.cat((u * cos + w * sin, w * cos - u * sin, rest), dim=-1)
    (expected_grad,) = torch.autograd.grad(expected, x, grad)
    got = tgpt.apply_partial_rotary(x, *tgpt.rotary_tables(seq_len, head_dim, rope_dims, 10000.0, "cpu", dtype))
    (got_grad,) = torch.autograd.grad(got, x, grad)
    assert torch.equal(got, expected) and torch.equal(got_grad, expected_grad)
    assert not torch.equal(got[..., :16], x[..., :16])  # the rotation did something


def test_scales_folded_into_the_output_weights_are_the_spec_block(tgpt):
    """Block.forward multiplies attn_scale/mlp_scale into the rows of W_o/W_down; the SPEC's block adds
    scale * branch output. Same loss and every gradient (the scales' included) in fp32, against the SPEC form
    written out here; attn_scale folded into W_o's columns instead (the wrong axis) does not pass."""
    from tgpt_util import compare_tiny_model_step

    def spec_block(block, x, x0, weights, rope, value_embed, collector=None, lora=None, attn_scale_on_columns=False):
        w_q, w_k, w_v, w_o, w_up, w_down = weights
        mix = block.resid_mix.to(x.dtype)
        x = mix[0] * x + mix[1] * x0
        if attn_scale_on_columns:  # the wrong fold: scales the attention's output features, not W_o's outputs
            x = x + block.attn(tgpt.rms_norm(x) * block.norm_factor, w_q, w_k, w_v,
                               w_o * block.attn_scale[None, :], rope, value_embed)
        else:
            attn = block.attn(tgpt.rms_norm(x) * block.norm_factor, w_q, w_k, w_v, w_o, rope, value_embed)
            x = x + block.attn_scale.to(x.dtype) * attn
        mlp = tgpt.leaky_relu_sq_mlp(tgpt.rms_norm(x) * block.norm_factor, w_up, w_down)
        return x + block.mlp_scale.to(x.dtype) * mlp

    def use(forward):
        def configure(model):
            with torch.no_grad():  # scales away from 1, so a misplaced scale changes the numbers
                for i, block in enumerate(model.blocks):
                    block.attn_scale.copy_(torch.linspace(0.5, 1.5, block.attn_scale.numel()) + 0.1 * i)
                    block.mlp_scale.copy_(torch.linspace(1.5, 0.5, block.mlp_scale.numel()) - 0.1 * i)
            for block in model.blocks:
                block.forward = forward.__get__(block)
        return configure

    result = compare_tiny_model_step(tgpt, use(tgpt.Block.forward), use(spec_block))
    assert result["loss"][0] == pytest.approx(result["loss"][1], abs=1e-6)
    assert result["grad_names"] and result["grad_max"]["blocks.0.attn_scale"] > 0
    assert result["grad_max"]["blocks.3.mlp_scale"] > 0
    assert result["max_grad_rel"] < 2e-5, result  # fp32 sums in another order (1.05e-5 seen); the wrong fold: > 1e-2
    wrong = compare_tiny_model_step(tgpt, use(tgpt.Block.forward),
                                    use(lambda *args: spec_block(*args, attn_scale_on_columns=True)))
    assert wrong["max_grad_rel"] > 1e-2, wrong


def test_newton_schulz_is_near_orthogonal(tgpt):
    torch.manual_seed(0)
    for shape in ((3, 64, 128), (2, 96, 32)):
        update = tgpt.newton_schulz5(torch.randn(shape), steps=5)
        singular = torch.linalg.svdvals(update)
        assert singular.min() > 0.5 and singular.max() < 1.3, (shape, singular.min(), singular.max())
    assert torch.count_nonzero(tgpt.newton_schulz5(torch.zeros(1, 8, 16), 5)) == 0  # pad rows stay zero


def test_fake_quantization_grid_and_straight_through(tgpt):
    weight = torch.randn(8, 16, requires_grad=True)
    layer = tgpt.CastedLinear(16, 8)
    with torch.no_grad():
        layer.weight.copy_(weight)
    layer.qat_active.fill_(1.0)
    x = torch.randn(4, 16)
    layer(x).sum().backward()
    sigma = (weight.detach().abs().amax(1, keepdim=True) / 31).clamp_min(1 / 31)
    quantized = tgpt.fake_quantize_int6_rows(weight.detach())
    steps = quantized / sigma
    assert torch.allclose(steps, steps.round(), atol=1e-4) and steps.min() >= -32 and steps.max() <= 31
    assert torch.allclose(layer.weight.grad, x.sum(0).expand(8, 16))  # straight-through: d(sum x W^T)/dW
    layer.eval()
    assert torch.allclose(layer(x), x @ weight.detach().T, atol=1e-5)  # eval mode never fake-quantizes


# ---- schedules ----
def test_warmdown_by_wallclock_and_by_iterations(tgpt):
    capped = tgpt.Hyperparameters.from_env({"MAX_WALLCLOCK_SECONDS": "600", "WARMDOWN_ITERS": "3500"})
    assert tgpt.lr_scale_at(capped, 1000, 80_000.0) == 1.0  # 80 ms/step: warmdown covers the last 280 s
    assert tgpt.lr_scale_at(capped, 5000, 400_000.0) == pytest.approx(200_000 / 280_000)
    assert tgpt.lr_scale_at(capped, 9000, 700_000.0) == 0.0
    uncapped = tgpt.Hyperparameters.from_env({"MAX_WALLCLOCK_SECONDS": "0", "ITERATIONS": "100", "WARMDOWN_ITERS": "40"})
    assert [tgpt.lr_scale_at(uncapped, s, 0.0) for s in (0, 59, 60, 80, 100)] == [1.0, 1.0, 1.0, 0.5, 0.0]
    h = tgpt.Hyperparameters()
    assert tgpt.muon_momentum_at(h, 0) == pytest.approx(0.92)
    assert tgpt.muon_momentum_at(h, 750) == pytest.approx(0.955)
    assert tgpt.muon_momentum_at(h, 5000) == pytest.approx(0.99)


# ---- BPB byte accounting ----
def test_byte_tables_count_the_utf8_bytes_of_the_decoded_text(tgpt, tiny_data):
    sp = tiny_data["sp"]
    tables = tgpt.build_byte_tables(sp, 1024)
    for text in tiny_data["docs"][:20] + ["naïve café — 東京 ok\u00a0x 12345", "  two  spaces"]:
        ids = [1] + sp.encode(text)  # BOS first, as in the shards
        prev, target = torch.tensor(ids[:-1]), torch.tensor(ids[1:])
        counted = int(tgpt.count_target_bytes(prev, target, tables).sum())
        assert counted == len(sp.decode(ids[1:]).encode("utf-8"))


# ---- training runs ----
def run_trainer(env: dict, cwd, nproc: int = 1, timeout: int = 600) -> str:
    command = [sys.executable, str(REPO / "train_gpt.py")]
    if nproc > 1:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=%d" % nproc,
                   str(REPO / "train_gpt.py")]
    out = subprocess.run(command, cwd=cwd, env=run_env(env), capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout


def parse_losses(stdout: str, key: str) -> dict:
    return {int(m.group(1)): float(m.group(2)) for m in re.finditer(r"step:(\d+)/\d+ [^\n]*?%s:([\d.]+)" % key, stdout)}


def test_tiny_model_loss_falls_and_log_has_the_record_lines(tgpt, tiny_data_short_val, tmp_path):
    env = dict(tiny_data_short_val["env"], ITERATIONS="20", TRAIN_LOG_EVERY="1", VAL_LOSS_EVERY="10", RUN_ID="falls",
               WARMDOWN_ITERS="20", LATE_QAT_THRESHOLD="0.5", EMA_ENABLED="0", SWA_ENABLED="1", SWA_EVERY="2",
               MUON_BETA2="0.9")
    stdout = run_trainer(env, tmp_path)
    train = parse_losses(stdout, "train_loss")
    val = parse_losses(stdout, "val_loss")
    assert sorted(train) == list(range(1, 21)) and sorted(val) == [0, 10, 20]
    assert train[20] < train[1] - 1.0 and val[20] < val[0] - 1.0
    log = (tmp_path / "logs" / "falls.txt").read_text(encoding="utf-8")
    assert log.startswith("code_sha256:")
    assert tgpt.strip_source((REPO / "train_gpt.py").read_text(encoding="utf-8")) in log  # the counted source
    for line in ("world_size:1 grad_accum_steps:8", "attention_backend:sdpa_cpu", "warmup_step:1/1",
                 "config:num_layers=4", "MUON_BETA2=0.9 is not a setting of this script and is IGNORED"):
        assert line in log, line
    for prefix in ("model_params:", "late_qat:enabled step:", "swa:start step:", "swa:applying SWA weights"):
        assert re.search("^" + prefix, stdout, re.M), prefix  # the console: the log also holds the source
    # the run's outputs sit in its own folder next to its log, never in the working directory, and the last line
    # says where
    assert sorted(os.listdir(tmp_path)) == ["logs"] and sorted(os.listdir(tmp_path / "logs")) == ["falls", "falls.txt"]
    assert sorted(os.listdir(tmp_path / "logs" / "falls")) == ["final_model.int6.ptz", "final_model.pt"]
    assert stdout.splitlines()[-1] == log.splitlines()[-1] == (
        "outputs: log:logs/falls.txt model:logs/falls/final_model.pt artifact:logs/falls/final_model.int6.ptz")


def test_two_ranks_match_one_rank_with_the_same_global_batch(tiny_data_short_val, tmp_path):
    """2 gloo ranks x grad_accum 4 vs 1 rank x grad_accum 8: same spans, Parallel Muon's reduce-scatter /
    all-gather vs the local path. Clipping is off: the record clips each rank's local grads, which is a
    different function of the batch by design. No final evaluation: what is compared is in the step lines
    (test_eval.py::test_two_ranks_give_the_one_rank_results compares the final evaluation on 2 ranks with 1)."""
    env = dict(tiny_data_short_val["env"], ITERATIONS="6", TRAIN_LOG_EVERY="1", VAL_LOSS_EVERY="3", GRAD_CLIP_NORM="0",
               FINAL_EVAL="0")
    one = run_trainer(dict(env, RUN_ID="one"), tmp_path)
    two = run_trainer(dict(env, RUN_ID="two"), tmp_path, nproc=2)
    assert "world_size:2 grad_accum_steps:4" in two
    for key in ("train_loss", "val_loss", "val_bpb"):
        a, b = parse_losses(one, key), parse_losses(two, key)
        assert a.keys() == b.keys() and len(a) >= 3
        assert max(abs(a[s] - b[s]) for s in a) <= 2e-4, (key, a, b)


def test_bad_inputs_fail_before_training_with_clear_errors(tiny_data, tmp_path):
    env = run_env(dict(tiny_data["env"], VOCAB_SIZE="2048", ITERATIONS="1"))
    out = subprocess.run([sys.executable, str(REPO / "train_gpt.py")], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode != 0
    assert "VOCAB_SIZE=2048 does not match the tokenizer" in out.stderr and tiny_data["env"]["TOKENIZER_PATH"] in out.stderr
    assert "VOCAB_SIZE=2048 does not match" in next((tmp_path / "logs").iterdir()).read_text()  # and in the log
    env = run_env(dict(tiny_data["env"], NUM_HEADS="5", TRAIN_BATCH_TOKENS="1000"))
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    out = subprocess.run([sys.executable, str(REPO / "train_gpt.py")], cwd=fresh, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 2 and "MODEL_DIM=64 must be divisible by NUM_HEADS=5" in out.stderr
    assert not (fresh / "logs").exists()  # nothing started


def test_warmup_rewind_restores_model_and_optimizer_exactly(tgpt, tiny_data):
    h = tgpt.Hyperparameters.from_env(dict(tiny_data["env"], WARMUP_STEPS="2"))
    dist_info = tgpt.DistInfo(0, 1, torch.device("cpu"))
    model = tgpt.build_model(h, dist_info.device)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizers = tgpt.Optimizers(h, model, dist_info)

    class Silent:
        def log(self, msg, console=True):
            pass

    tgpt.warmup_and_rewind(h, dist_info, Silent(), model, model, optimizers,
                           lambda: tgpt.make_train_loader(h, dist_info, Silent()))
    after = model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(len(opt.state) == 0 for opt in optimizers.all)


def test_every_setting_named_in_run_sh_and_record_readmes_is_a_field(tgpt):
    """A `NAME=value` in run.sh or a record's run command that no field reads would silently change nothing (the
    record's README set EMA_ENABLED/LATE_QAT that its script never read)."""
    fields = {f.name.upper() for f in dataclasses.fields(tgpt.Hyperparameters)}
    launcher = {"NPROC", "RUN_ID", "PYTHON", "GPUS", "SEED", "RANK", "WORLD_SIZE", "PRESET", "CUDA_VISIBLE_DEVICES"}
    sources = [REPO / "run.sh"] + sorted((REPO / "records").glob("*/*/README.md"))
    checked = 0
    for path in sources:
        for name in re.findall(r"\b([A-Z][A-Z0-9_]{2,})=", path.read_text(encoding="utf-8")):
            checked += 1
            assert name in fields or name in launcher, "%s sets %s, which is not a Hyperparameters field" % (path, name)
    assert checked >= 20  # run.sh's presets alone name more than 20 settings
