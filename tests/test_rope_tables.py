"""One RoPE table per model and length, made once by eager code and read by every path. A table built
inside a compiled graph gets the backend's roundings (CPU inductor keeps bf16 positions but drops theta's bf16
cast; CUDA keeps theta's and drops the positions', bench/NOTES.md "RoPE tables"), so a compiled scoring forward
and the eager TTT-training / GPTQ-calibration forwards would otherwise see different positional encodings."""
import pytest
import torch

from tgpt_util import TINY_0409_ENV, TINY_0427_ENV, TINY_MODEL_ENV, tgpt  # noqa: F401  (fixture)

CPU = torch.device("cpu")


@pytest.mark.parametrize("env", [TINY_MODEL_ENV, TINY_0409_ENV, TINY_0427_ENV],
                         ids=["2026-03-23", "2026-04-09", "2026-04-27"])
def test_compiled_and_eager_forwards_use_the_same_table(tgpt, env, monkeypatch):
    h = tgpt.Hyperparameters.from_env(dict(env, TRAIN_SEQ_LEN="128", EVAL_SEQ_LEN="128"))
    model = tgpt.build_model(h, CPU).eval()
    with torch.no_grad():  # non-zero output projections, so attention (and RoPE) reaches the hidden states
        model.qo_bank[h.num_layers:].normal_(0.0, 0.05, generator=torch.Generator().manual_seed(1))
        model.mlp_down_bank.normal_(0.0, 0.05, generator=torch.Generator().manual_seed(2))
    # made by build_model: 128, and for TRAIN_LOADER=documents (04-27) the packed row's length too
    assert list(model.rope_cache) == [(length, torch.float32, CPU) for length in model.rope_lengths]
    assert 128 in model.rope_lengths
    made = []
    real = tgpt.rotary_tables
    monkeypatch.setattr(tgpt, "rotary_tables", lambda *args: made.append(args) or real(*args))
    ids = torch.randint(0, h.vocab_size, (2, 128), generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(model.forward_hidden, dynamic=False, fullgraph=True)
    with torch.no_grad():
        scored = compiled(ids)  # TTT scoring and the sliding/round-trip evals
        trained = model.forward_hidden(ids)  # TTT training (GPT.forward) and the plain eager evals
        calibrated = model.forward_hidden(ids, tgpt.HessianCollector())  # GPTQ calibration
    assert made == []  # no path built a table of its own, compiled or not
    assert (scored - trained).abs().max().item() < 1e-4
    assert torch.equal(trained, calibrated)


def test_a_compiled_forward_of_an_unprepared_length_is_refused(tgpt):
    h = tgpt.Hyperparameters.from_env(dict(TINY_MODEL_ENV))
    model = tgpt.build_model(h, CPU)
    compiled = torch.compile(model.forward_hidden, dynamic=False, fullgraph=True)
    with pytest.raises(Exception, match="no RoPE table of length 32 was made before compiling"):
        compiled(torch.zeros(1, 32, dtype=torch.int64))
    model.forward_hidden(torch.zeros(1, 32, dtype=torch.int64))  # eager code makes it on first use
    assert (32, torch.float32, CPU) in model.rope_cache


def test_the_04_27_tables_have_no_ntk_rescale_at_any_length(tgpt):
    """SPEC_0427 §4: ROPE_NTK=0, so a packed row's table (98,304 positions in the record) continues the 2,048-token
    one instead of rescaling the base; with NTK (04-09's rule) the longer table's base moves."""
    h = tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-27"})
    assert not h.rope_ntk and tgpt.Hyperparameters.from_env({"RECIPE": "2026-04-09"}).rope_ntk
    with torch.device("meta"):
        model = tgpt.GPT(h)
    short, long = (tgpt.rotary_tables(n, 64, 16, 10000.0, CPU, torch.float32, *model.rope_args)[0] for n in (2048, 8192))
    assert torch.equal(long[:2048], short)
    rescaled = tgpt.rotary_tables(8192, 64, 16, 10000.0, CPU, torch.float32, 2048, True)[0]
    assert (rescaled[:2048] - short).abs().max() > 1e-2
