"""The phased LoRA TTT (TTT_MODE=lora_phased) of a tiny random 2026-04-27 model on synthetic documents, recorded:
every scoring call's targets, nll and the phases run before it, each phase's SGD documents and stream length, and
each batch's adapters A at its start. Imported by tests/test_ttt_phased.py for one process; run under torchrun (gloo
ranks; argv[2]: the number of documents) it also slows rank 0 by DELAY seconds per batch, records the time each rank
spends inside collectives and any file it opens during the eval, and saves rank r's record to argv[1] + ".r"."""
import builtins
import contextlib
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tgpt_util import TINY_0427_ENV, load_train_gpt  # noqa: E402

# 14 documents in batches of 3 (5 batches), phases after 3 and 7 scored documents, 16-target chunks, 128 context
TTT_ENV = dict(TINY_0427_ENV, EVAL_SEQ_LEN="128", TTT_LORA_CHUNK="16", TTT_DOC_BATCH="3", TTT_PHASE_DOCS="3,7",
               TTT_CHUNK_TOKENS="128", TTT_LORA_RANK="4", TTT_LORA_LR="0.01", TTT_LR="0.05")
DELAY = 0.5


def synthetic_tokens(seed: int = 0, docs: int = 14) -> torch.Tensor:
    """docs documents of 2-150 tokens (BOS first, no BOS inside) and a final BOS: the last document's last target."""
    generator = torch.Generator().manual_seed(seed)
    lengths = torch.randint(2, 150, (docs,), generator=generator).tolist()
    parts = [torch.cat((torch.ones(1, dtype=torch.int64), torch.randint(2, 1024, (n - 1,), generator=generator)))
             for n in lengths]
    return torch.cat(parts + [torch.ones(1, dtype=torch.int64)]).to(torch.int32)


def random_model(tg, h, seed: int = 0):
    """The tiny model with every parameter random (W_o and W_down too, so attention reaches the output), looped."""
    model = tg.build_model(h, torch.device("cpu"))
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            small = name == "tok_emb.weight" or name.endswith("_bank")
            param.add_(torch.randn(param.shape, generator=generator) * (0.05 if small else 0.5))
    model.looping = True
    return model


class Quiet:
    def log(self, message: str) -> None:
        pass


@contextlib.contextmanager
def recorded(tg, record: dict):
    """Wraps the eval's helpers (module globals) to record what they are given and return."""
    originals = {name: getattr(tg, name) for name in ("accumulate_scores", "phase_documents", "global_sgd_phase",
                                                       "lora_ttt_batch")}
    record.update(scores=[], gathered=[], streams=[], batch_a=[])

    def accumulate_scores(sums, nll, scored, targets, target_bytes):
        record["scores"].append((targets[scored].clone(), nll[scored].clone(), len(record["gathered"])))
        return originals["accumulate_scores"](sums, nll, scored, targets, target_bytes)

    def phase_documents(*args):
        record["gathered"].append(originals["phase_documents"](*args).tolist())
        return torch.tensor(record["gathered"][-1])

    def global_sgd_phase(*args):
        record["streams"].append(originals["global_sgd_phase"](*args))
        return record["streams"][-1]

    def lora_ttt_batch(h, lora, *args):
        record["batch_a"].append({kind: a.detach().clone() for kind, a in lora.a.items()})
        return originals["lora_ttt_batch"](h, lora, *args)

    for name, wrapper in (("accumulate_scores", accumulate_scores), ("phase_documents", phase_documents),
                          ("global_sgd_phase", global_sgd_phase), ("lora_ttt_batch", lora_ttt_batch)):
        setattr(tg, name, wrapper)
    try:
        yield record
    finally:
        for name, original in originals.items():
            setattr(tg, name, original)


def run_phased(tg, tokens: torch.Tensor, dist_info=None, seed: int = 0) -> dict:
    """-> {scores, gathered, streams, batch_a, result (val_loss, val_bpb)} of one phased TTT eval on `tokens`."""
    h = tg.Hyperparameters.from_env(TTT_ENV)
    dist_info = dist_info or tg.DistInfo(0, 1, torch.device("cpu"))
    model = random_model(tg, h, seed)
    target_bytes = torch.ones(tokens.numel() - 1, dtype=torch.int32)
    with recorded(tg, {}) as record:
        record["result"] = tg.phased_ttt_eval(h, dist_info, Quiet(), model, tokens, target_bytes, {})
    return record


if __name__ == "__main__":
    tg = load_train_gpt()
    dist_info = tg.init_distributed(os.environ)
    dist = torch.distributed
    waits, opened = [], []
    timed = {name: getattr(dist, name) for name in ("all_reduce", "barrier")}

    def timing(name):
        def call(*args, **kwargs):
            started = time.perf_counter()
            try:
                return timed[name](*args, **kwargs)
            finally:
                waits.append((name, time.perf_counter() - started))
        return call

    batch = tg.lora_ttt_batch
    def slow_batch(*args):  # rank 0 is the slow one: the others finish each phase's share first
        time.sleep(DELAY if dist_info.rank == 0 else 0.0)
        return batch(*args)

    tempfile.gettempdir()  # torch's inductor asks for it lazily; Python probes the folder with a file, once
    file_openers = {"open": (builtins, builtins.open), "os.open": (os, os.open)}
    for name in timed:
        setattr(dist, name, timing(name))
    tg.lora_ttt_batch = slow_batch
    for name, (owner, original) in file_openers.items():
        setattr(owner, name.split(".")[-1], lambda *a, _o=original, _n=name, **k: opened.append((_n, a[0])) or
                _o(*a, **k))
    try:
        record = run_phased(tg, synthetic_tokens(docs=int(sys.argv[2])), dist_info)
    finally:
        for name, (owner, original) in file_openers.items():
            setattr(owner, name.split(".")[-1], original)
        for name, original in timed.items():
            setattr(dist, name, original)
    record.update(waits=waits, opened=[str(entry) for entry in opened], rank=dist_info.rank)
    torch.save(record, "%s.%d" % (sys.argv[1], dist_info.rank))
    dist.barrier()
