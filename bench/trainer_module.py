"""Shared by the bench scripts: import a training script (default train_gpt.py) as a module, failing clearly
when the file is missing or lacks the names a benchmark needs."""
import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]


def load_trainer(path: Path = REPO / "train_gpt.py", needed=()):
    if not path.is_file():
        sys.exit(f"{path}: no such file (run from the repo root or pass --module)")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # before exec: @dataclass resolves annotations through sys.modules
    spec.loader.exec_module(module)
    missing = [name for name in needed if not hasattr(module, name)]
    if missing:
        sys.exit(f"{path} lacks the names this benchmark needs: {', '.join(missing)}")
    return module


def micro_batch_layout(h, dist_info) -> SimpleNamespace:
    """One rank's place in the SPEC §3 stream: each micro-step takes world_size spans of local_tokens + 1 tokens."""
    local_tokens = h.train_batch_tokens // (dist_info.world_size * dist_info.grad_accum_steps)
    return SimpleNamespace(rank=dist_info.rank, world_size=dist_info.world_size, local_tokens=local_tokens,
                           seq_len=h.train_seq_len, span=local_tokens + 1)


def events_elapsed_ms(event_pairs) -> float:
    """Sum of elapsed_time over (before, after) CUDA event pairs; waits for them."""
    for _, after in event_pairs:
        after.synchronize()
    return sum(before.elapsed_time(after) for before, after in event_pairs)


class ConsoleLogger:
    """The trainer's Logger interface without a log file (a benchmark's output is its table)."""

    def log(self, msg: str, console: bool = True) -> None:
        print(msg, flush=True)


def configure_kernels(tg, h, dist_info, model) -> tuple:
    """Selects attention backend, q/k, MLP and CE kernels as the trainer's `run` does and sets them on `model`;
    works for older trainers without those choices. Returns (short label, description with the reasons)."""
    if hasattr(tg, "select_kernels"):
        kernels = tg.select_kernels(h, dist_info)
        parts = [part for part in ("qk", "mlp", "ce") if part in kernels]  # the fused ops this trainer has
        tg.use_kernels(model, kernels["attention"][0], *(kernels[part][0] for part in parts),
                       **({"doc_attention": kernels["doc_attention"][0]} if "doc_attention" in kernels else {}))
        backend, reason = kernels["attention"]
        return (",".join([backend] + ["%s:%s" % (part, kernels[part][0]) for part in parts]),
                " ".join(["%s (%s)" % (backend, reason)] + ["%s_kernel:%s (%s)" % ((part,) + kernels[part])
                                                            for part in parts]))
    backend, reason = tg.select_attention_backend(h, dist_info)
    if not hasattr(tg, "select_qk_kernel"):
        model.set_attention_backend(backend)
        return backend, "%s (%s)" % (backend, reason)
    qk_kernel, qk_reason = tg.select_qk_kernel(h, dist_info)
    model.set_attention_backend(backend, qk_kernel)
    label = "%s,qk:%s" % (backend, qk_kernel)
    description = "%s (%s) qk_kernel:%s (%s)" % (backend, reason, qk_kernel, qk_reason)
    if hasattr(tg, "select_mlp_kernel"):
        mlp_kernel, mlp_reason = tg.select_mlp_kernel(h, dist_info)
        model.set_mlp_kernel(mlp_kernel)
        label += ",mlp:%s" % mlp_kernel
        description += " mlp_kernel:%s (%s)" % (mlp_kernel, mlp_reason)
    return label, description
