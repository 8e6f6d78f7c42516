"""Run by tests/test_pack.py with TRITON_INTERPRET=1: train_gpt.py packed by records.pack, imported as a module,
its Triton kernels built and run from the packed file. Prints one JSON object.

Under the interpreter `triton.jit` returns an InterpretedFunction, which does not read the source when it is
created; the GPU's JITFunction does, and refuses a function without source ("@jit functions should be defined
in a Python file"). So every kernel of the packed module is also handed to JITFunction, and a plain `exec` of a
kernel (no linecache registration) shows that this construction fails without what the wrapper does."""
import importlib.util
import inspect
import json
import sys
import tempfile
from pathlib import Path

import torch
import triton
from triton.runtime.interpreter import InterpretedFunction
from triton.runtime.jit import JITFunction

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from records.pack import pack_source, read_source  # noqa: E402
from tgpt_util import REPO, compare_tiny_model_step  # noqa: E402

source = read_source(REPO / "train_gpt.py")
scratch = Path(tempfile.mkdtemp())
packed_path = scratch / "train_gpt.py"
packed_path.write_bytes(pack_source(source))
spec = importlib.util.spec_from_file_location("packed_train_gpt", packed_path)
tg = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = tg
spec.loader.exec_module(tg)

results = {"kernels": {}, "functions_with_source": 0, "functions_without_source": []}
for name, value in vars(tg).items():
    if isinstance(value, InterpretedFunction):
        jit = JITFunction(value.fn)  # what @triton.jit builds on a GPU: reads the source via inspect
        lines = source.splitlines(True)[jit.starting_line_number - 1:][:len(jit.raw_src)]
        results["kernels"][name] = {"source_lines_match": jit.raw_src == lines and jit.src.startswith("def %s(" % name),
                                    "file": jit.fn.__code__.co_filename}
    elif inspect.isfunction(value) and value.__module__ == tg.__name__:
        # torch.library.triton_op finds the kernels an op launches by reading the op's source
        try:
            found = inspect.getsource(value) in source
        except OSError:
            found = False
        if found:
            results["functions_with_source"] += 1
        else:
            results["functions_without_source"].append(name)

# Negative control: the same construction on a kernel defined by a plain exec fails.
plain = {}
exec(compile("import triton\n@triton.jit\ndef plain_kernel(x):\n    pass\n", "<plain exec>", "exec"), plain)
try:
    JITFunction(plain["plain_kernel"].fn)
    results["plain_exec_error"] = None
except ValueError as exc:
    results["plain_exec_error"] = str(exc)

# The kernels run from the packed file: one fp32 step of the tiny model, every fused op against the PyTorch form.
results["model"] = compare_tiny_model_step(
    tg, lambda model: tg.use_kernels(model, "sdpa_cpu", "torch", "torch"),
    lambda model: tg.use_kernels(model, "sdpa_cpu", "triton", "triton"))
results["triton_version"] = triton.__version__
results["torch_version"] = torch.__version__
print(json.dumps(results))
