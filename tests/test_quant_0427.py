"""CPU tests of the 2026-04-27 quantizer (SPEC_0427 §8.2-§8.3): the per-category rule on the record's tensors,
int7 and int8 round trips bit-exact against NumPy references, LQER's choice of tensors, its error reduction, its
int2/int4 factors against a reference and its dequantization against a dense one, the settings."""
import numpy as np
import pytest
import torch

from tgpt_util import tgpt  # noqa: F401 (fixture)


def h0427(tgpt, **env):
    return tgpt.Hyperparameters.from_env(dict({"RECIPE": "2026-04-27"}, **{k: str(v) for k, v in env.items()}))


def test_rule_on_the_2026_04_27_tensors(tgpt):
    h = h0427(tgpt)
    assert (h.mlp_clip_sigmas, h.attn_clip_sigmas, h.embed_clip_sigmas, h.embed_bits) == (11.5, 13.0, 14.0, 7)
    assert (h.attn_gate_int8, h.lqer_rank, h.lqer_top_k, h.lqer_group, h.gptq_calibration_batches) == (
        True, 4, 3, 64, 16)
    plan = lambda name, *shape: tgpt.quantization_plan(h, name, torch.empty(shape, device="meta"))  # noqa: E731
    assert plan("tok_emb.weight", 8192, 512) == ("int7", 7, 14.0)
    assert plan("blocks.3.mlp.fc.weight", 2048, 512) == plan("blocks.3.mlp.proj.weight", 512, 2048) == (
        "int6", 6, 11.5)
    for name in ("c_q", "c_k", "c_v", "proj"):
        assert plan(f"blocks.0.attn.{name}.weight", 256, 512) == ("int6", 6, 13.0)
    assert plan("blocks.0.attn.attn_gate_w", 8, 12) == ("int8", 8, 0.0)
    for name, shape in (("smear_gate.weight", (12,)), ("smear_lambda", ()), ("blocks.0.attn.q_gain", (8,)),
                        ("blocks.9.parallel_post_lambdas", (2, 2))):
        assert plan(name, *shape) == ("passthrough", 0, 0.0)
    h09 = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"})  # 0: MATRIX_CLIP_SIGMAS, the gate fp16
    assert tgpt.quantization_plan(h09, "blocks.0.mlp.fc.weight", torch.empty(2048, 512)) == ("int6", 6, 12.85)
    assert tgpt.quantization_plan(h09, "blocks.0.attn.attn_gate_w", torch.empty(8, 12))[0] == "passthrough"


def reference_round(w, divisor, low, high):
    """float64 NumPy: per row s = fp16(max|row| / divisor), q = clip(round(row / s), low, high)."""
    scale = (np.abs(w).max(axis=1) / divisor).astype(np.float16)
    return np.clip(np.round(w / np.where(scale > 0, scale, 1).astype(np.float64)[:, None]), low, high), scale


def test_int7_embedding_and_int8_gate_are_bit_exact_against_references(tgpt):
    generator = torch.Generator().manual_seed(0)
    emb = torch.randn(1000, 256, generator=generator) * 0.02
    emb[:10, 0] = 1.0  # outliers past 14 std: clamped at 63
    # tok_emb at int7, k 14 with an identity Hessian (no error feedback): round to nearest on fp16(14 std / 63)
    q, scale = tgpt.gptq_quantize(emb, torch.eye(256), 7, 14.0)
    w = emb.double().numpy()
    ref_scale = (14.0 * w.std(axis=1, ddof=1) / 63).astype(np.float16)
    ref_q = np.clip(np.round(w / ref_scale.astype(np.float64)[:, None]), -63, 63)
    assert np.array_equal(scale.numpy(), ref_scale) and np.array_equal(q.numpy(), ref_q.astype(np.int8))
    assert q.max() == 63 and q.min() >= -63
    gate = torch.randn(8, 12, generator=generator)
    gate[3] = 0.0  # a gate row that never trained
    flat = {"blocks.0.attn.attn_gate_w": gate, "tok_emb.weight": emb}
    tensors, meta = tgpt.quantize_state_dict(flat, h0427(tgpt, LQER_RANK=0), {"tok_emb.weight": torch.eye(256)})
    assert meta == {"blocks.0.attn.attn_gate_w": {"type": "int8"}, "tok_emb.weight": {"type": "int7"}}
    ref_q, ref_scale = reference_round(gate.double().numpy(), 127, -127, 127)
    assert np.array_equal(tensors["blocks.0.attn.attn_gate_w.q"].numpy(), ref_q.astype(np.int8))
    assert np.array_equal(tensors["blocks.0.attn.attn_gate_w.scale"].numpy(), ref_scale)
    assert np.array_equal(tensors["tok_emb.weight.q"].numpy(), q.numpy())
    blob = tgpt.serialize_artifact(tensors, meta, "lzma")
    loaded = tgpt.dequantize_state_dict(*tgpt.deserialize_artifact(blob), flat)
    assert torch.equal(loaded["blocks.0.attn.attn_gate_w"], torch.from_numpy(ref_q * ref_scale[:, None]).float())
    assert torch.equal(loaded["blocks.0.attn.attn_gate_w"][3], torch.zeros(12))


def lqer_case(tgpt, top_k=2):
    generator = torch.Generator().manual_seed(1)
    flat = {f"blocks.{i}.mlp.fc.weight": torch.randn(300, 256, generator=generator) * (0.5 + i) for i in range(3)}
    flat["blocks.0.attn.c_q.weight"] = torch.randn(260, 260, generator=generator)  # B: 4 x 260, groups of 64: padded
    hessians = {}
    for name, weight in flat.items():
        x = torch.randn(400, weight.shape[1], generator=generator)
        hessians[name] = x.T @ x
    plain = tgpt.quantize_state_dict(flat, h0427(tgpt, LQER_RANK=0), hessians)
    corrected = tgpt.quantize_state_dict(flat, h0427(tgpt, LQER_TOP_K=top_k), hessians)
    return flat, plain, corrected


def test_lqer_corrects_the_largest_errors_and_lowers_them(tgpt):
    flat, (plain, meta), (tensors, meta_lqer) = lqer_case(tgpt)
    assert meta == meta_lqer
    errors = {name: float((flat[name] - tgpt.dequantize_rows(plain, name)).norm()) for name in flat}
    chosen = sorted(errors, key=errors.get)[-2:]
    assert sorted(name for name in flat if name + ".lqA" in tensors) == sorted(chosen)
    for name in flat:
        assert torch.equal(tensors[name + ".q"], plain[name + ".q"])  # LQER adds a term, q is GPTQ's
        after = float((flat[name] - tgpt.dequantize_rows(tensors, name)).norm())
        assert after < 0.97 * errors[name] if name in chosen else after == errors[name]


def test_lqer_factors_and_dequantization_match_references(tgpt):
    flat, (plain, _), (tensors, meta) = lqer_case(tgpt, top_k=4)
    for name, weight in flat.items():
        rows, cols = weight.shape
        base = plain[name + ".q"].double().numpy() * plain[name + ".scale"].double().numpy()[:, None]
        u, sigma, vh = torch.linalg.svd(weight - torch.from_numpy(base).float(), full_matrices=False)
        a = (u[:, :4] * sigma[:4]).double().numpy()
        qa, sa = reference_round(a.reshape(1, -1), 1.5, -2, 1)
        b = np.concatenate([vh[:4].double().numpy().ravel(), np.zeros(-4 * cols % 64)]).reshape(-1, 64)
        qb, sb = reference_round(b, 7.5, -8, 7)
        assert np.array_equal(tensors[name + ".lqA"].numpy(), qa.reshape(rows, 4).astype(np.int8))
        assert np.array_equal(tensors[name + ".lqAs"].numpy(), sa)
        assert np.array_equal(tensors[name + ".lqBs"].numpy(), sb)
        assert np.array_equal(tensors[name + ".lqB"].numpy(), qb.astype(np.int8))
        assert qa.min() >= -2 and qa.max() <= 1 and qb.min() >= -8 and qb.max() <= 7
        dense = base + (qa.reshape(rows, 4) * sa[0]) @ (qb * sb[:, None]).ravel()[:4 * cols].reshape(4, cols)
        blob = tgpt.serialize_artifact(tensors, meta, "lzma")
        loaded = tgpt.dequantize_state_dict(*tgpt.deserialize_artifact(blob), flat)
        assert np.allclose(loaded[name].double().numpy(), dense, rtol=0, atol=1e-5)


def test_lqer_and_clip_settings_are_validated(tgpt):
    with pytest.raises(tgpt.ConfigError) as info:
        h0427(tgpt, LQER_RANK=-1, LQER_TOP_K=0, LQER_GROUP=0, MLP_CLIP_SIGMAS=-1)
    assert sorted(info.value.errors) == sorted([
        "LQER_RANK=-1 must be >= 0", "LQER_TOP_K=0 must be >= 1", "LQER_GROUP=0 must be >= 1",
        "MLP_CLIP_SIGMAS=-1.0 must be >= 0 (0: MATRIX_CLIP_SIGMAS)"])
    with pytest.raises(tgpt.ConfigError, match="ATTN_GATE_INT8, LQER_RANK apply to QUANTIZER=gptq only"):
        tgpt.Hyperparameters.from_env({"LQER_RANK": "4", "ATTN_GATE_INT8": "1"})
