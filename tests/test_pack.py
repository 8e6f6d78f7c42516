"""records/pack.py: the counted form of train_gpt.py. Round trip and byte-determinism, a packed file runs like the
readable one (__main__, @dataclass, inspect, readable tracebacks, Triton @jit under the interpreter, a real tiny
CPU training whose log carries the readable source's sha256), and an edited file stops with a line naming it."""
import hashlib
import importlib.util
import re
import shutil
import subprocess
import sys

import pytest

from tgpt_util import REPO, run_env, run_under_triton_interpreter, tiny_data, tiny_data_short_val  # noqa: F401

sys.path.insert(0, str(REPO))
from records.pack import (PackError, is_packed, main as pack_main, pack_source, read_source,  # noqa: E402
                          strip_source, unpack)
from records.parse import parse_log  # noqa: E402

SCRIPT = REPO / "train_gpt.py"
# The same text packs to these bytes with brotli 1.0.9, 1.1.0 and 1.2.1 on Python 3.10 and 3.11 (measured).
FIXED_SOURCE = ('"""A fixed input: its packed bytes must be the same on every machine."""\n'
                'print("hello, packed world")\n')
FIXED_PACKED_SHA256 = "f39732881cf56cec08f05c280e1d3d15bc56bd131f10451b6e00a7d5ce128b87"
SMALL_PROGRAM = '''"""A program that uses what a packed file must keep working."""
import dataclasses
import inspect
import sys


@dataclasses.dataclass(frozen=True)
class Settings:
    steps: int = 3


def fail_here():
    raise RuntimeError("raised on the readable line")


print("name=%s settings=%s source=%s" % (__name__, Settings(), inspect.getsource(fail_here).splitlines()[0]))
if __name__ == "__main__" and "--fail" in sys.argv:
    fail_here()
'''
def write_packed(path, source: str) -> bytes:
    packed = pack_source(source)
    path.write_bytes(packed)
    return packed


# ---- the format ----
def test_round_trip_is_exact_and_byte_deterministic(tmp_path):
    source = read_source(SCRIPT)
    packed = pack_source(source)
    assert is_packed(packed) and not is_packed(SCRIPT.read_bytes())
    assert packed.decode("ascii") and len(packed.splitlines()) == 9
    assert unpack(packed, "x.py") == source and pack_source(source) == packed
    assert len(packed) < len(source.encode("utf-8")) // 3  # 46,979 of 147,041 bytes when written
    assert hashlib.sha256(pack_source(FIXED_SOURCE)).hexdigest() == FIXED_PACKED_SHA256
    other_process = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from records.pack import pack_source, "
         "read_source; sys.stdout.buffer.write(pack_source(read_source(sys.argv[2])))", str(REPO), str(SCRIPT)],
        env=run_env({"PYTHONHASHSEED": "12345"}), capture_output=True, timeout=120)
    assert other_process.returncode == 0 and other_process.stdout == packed
    with pytest.raises(ValueError, match="CR characters"):
        pack_source("print(1)\r\nprint(2)\n")


def test_cli_packs_verifies_and_unpacks(tmp_path, capsys):
    help_run = subprocess.run([sys.executable, "-m", "records.pack", "--help"], cwd=REPO, env=run_env({}),
                              capture_output=True, text=True, timeout=120)
    assert help_run.returncode == 0 and "records.pack unpack" in help_run.stdout
    packed_path, source_path = tmp_path / "packed.py", tmp_path / "source.py"
    assert pack_main(["pack", str(SCRIPT), "-o", str(packed_path)]) == 0
    stripped = strip_source(read_source(SCRIPT))  # the counted file runs the source without comments, docstrings
    digest = hashlib.sha256(stripped.encode("utf-8")).hexdigest()
    assert "%d bytes" % packed_path.stat().st_size in capsys.readouterr().out
    assert pack_main(["verify", str(packed_path)]) == 0 and digest in capsys.readouterr().out
    assert pack_main(["unpack", str(packed_path), "-o", str(source_path)]) == 0
    assert source_path.read_text(encoding="utf-8") == stripped and digest in capsys.readouterr().err
    assert pack_main(["pack", str(packed_path), "-o", str(tmp_path / "twice.py")]) == 2
    assert "already packed" in capsys.readouterr().err and not (tmp_path / "twice.py").exists()


def test_the_packer_is_the_repositorys_trainer_whatever_the_working_directory(tmp_path):
    """records.pack packs with train_gpt.py's pack_source (the function the trainer counts its bytes with), taken
    from the repository even when the working directory holds another train_gpt.py (a record folder's)."""
    (tmp_path / "train_gpt.py").write_text("raise SystemExit('the working directory\\'s train_gpt.py was imported')\n")
    ran = subprocess.run([sys.executable, "-m", "records.pack", "pack", str(SCRIPT), "-o", str(tmp_path / "out.py")],
                         cwd=tmp_path, env=run_env({"PYTHONPATH": str(REPO)}), capture_output=True, text=True,
                         timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert (tmp_path / "out.py").read_bytes() == pack_source(strip_source(read_source(SCRIPT)))


def test_cli_without_brotli_says_so(tmp_path):
    probe = "import sys; sys.modules['brotli'] = None; from records.pack import main; sys.exit(main(sys.argv[1:]))"
    result = subprocess.run([sys.executable, "-c", probe, "pack", str(SCRIPT), "-o", str(tmp_path / "out.py")],
                            cwd=REPO, env=run_env({}), capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and not (tmp_path / "out.py").exists()
    assert result.stderr.startswith("error: records.pack needs brotli, which this Python (")


# ---- a packed file runs like the readable one ----
def test_packed_program_keeps_main_dataclass_inspect_and_readable_tracebacks(tmp_path):
    packed_path = tmp_path / "program.py"
    write_packed(packed_path, SMALL_PROGRAM)
    ran = subprocess.run([sys.executable, str(packed_path)], cwd=tmp_path, env=run_env({}), capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == "name=__main__ settings=Settings(steps=3) source=def fail_here():\n"
    failed = subprocess.run([sys.executable, str(packed_path), "--fail"], cwd=tmp_path, env=run_env({}),
                            capture_output=True, text=True, timeout=120)
    assert failed.returncode == 1
    assert 'File "<%s>", line 13, in fail_here\n    raise RuntimeError("raised on the readable line")' % packed_path \
        in failed.stderr
    assert failed.stderr.rstrip().endswith("RuntimeError: raised on the readable line")
    spec = importlib.util.spec_from_file_location("packed_program", packed_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    hook = sys.excepthook
    try:
        spec.loader.exec_module(module)  # imported, not run: no main, the interpreter's excepthook untouched
        assert module.Settings().steps == 3 and module.__name__ == "packed_program" and sys.excepthook is hook
    finally:
        del sys.modules[spec.name]


@pytest.mark.parametrize("where", ["payload start", "payload middle", "payload end", "stated sha256"])
def test_an_edited_file_stops_with_one_line_naming_it(tmp_path, where):
    packed_path = tmp_path / "train_gpt.py"
    text = write_packed(packed_path, read_source(SCRIPT)).decode("ascii")
    sha_at = text.index('"', text.index("_f,_h=") + 12) + 1
    payload_at = text.index('_p="') + len('_p="')
    payload_end = text.index('"', payload_at)
    at = {"payload start": payload_at, "payload middle": (payload_at + payload_end) // 2,
          "payload end": payload_end - 1, "stated sha256": sha_at}[where]
    replacement = "0" if text[at] != "0" else "1"  # a valid base85 (and hex) character: the file still parses
    edited = text[:at] + replacement + text[at + 1:]
    packed_path.write_bytes(edited.encode("ascii"))
    ran = subprocess.run([sys.executable, str(packed_path)], cwd=tmp_path, env=run_env({}), capture_output=True,
                         text=True, timeout=120)
    assert ran.returncode == 1 and ran.stdout == ""
    assert ran.stderr.splitlines() == ["%s: the packed source does not decode to sha256 %s: the file was edited "
                                       "after packing" % (packed_path, edited[sha_at:sha_at + 64])]
    with pytest.raises(PackError, match=r"^train_gpt\.py: the packed source (does not decode|is not the one)"):
        unpack(packed_path.read_bytes(), "train_gpt.py")


def test_an_edited_wrapper_is_not_a_packed_file():
    packed = pack_source(FIXED_SOURCE).replace(b"sys.excepthook=", b"sys.excepthook =")
    with pytest.raises(PackError, match="its wrapper was edited"):
        unpack(packed, "train_gpt.py")


def test_packed_trainer_kernels_build_and_run_under_the_triton_interpreter():
    results = run_under_triton_interpreter("packed_interpreted.py")
    kernels = results["kernels"]
    assert len(kernels) >= 10 and all(kernel["source_lines_match"] for kernel in kernels.values()), kernels
    assert all(re.fullmatch(r"<.*train_gpt\.py>", kernel["file"]) for kernel in kernels.values())
    assert results["functions_without_source"] == [] and results["functions_with_source"] > 50
    assert results["plain_exec_error"] == "@jit functions should be defined in a Python file"
    model = results["model"]
    assert model["loss"][0] == pytest.approx(model["loss"][1], abs=1e-6)
    assert model["grad_names"] and model["num_grads"] >= 30 and model["max_grad_rel"] < 1e-4, model


def test_packed_trainer_trains_on_cpu_logs_its_counted_bytes_and_makes_a_record_that_checks(tiny_data_short_val,
                                                                                            tmp_path):
    """The packed trainer's round trip: pack -> a tiny CPU run of the packed file -> its log carries the readable source
    (sha256 and text) and counts exactly the packed file's bytes, before training and at the end -> records.make
    builds a folder that check passes; a one-byte edit of the payload then fails check."""
    readable = read_source(SCRIPT)
    source = strip_source(readable)
    packed_path = tmp_path / "train_gpt.py"
    packed = write_packed(packed_path, source)
    settings = {"ITERATIONS": "4", "VAL_LOSS_EVERY": "2", "EVAL_STRIDE": "32", "TTT_CHUNK_TOKENS": "8192",
                "TTT_EPOCHS": "1", "SEED": "7", "RUN_ID": "packed_run"}
    ran = subprocess.run([sys.executable, str(packed_path)], cwd=tmp_path,
                         env=run_env(dict(tiny_data_short_val["env"], **settings)),
                         capture_output=True, text=True, timeout=900)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-3000:]
    log = tmp_path / "logs" / "packed_run.txt"
    run = parse_log(log)
    assert run.code_sha256 == hashlib.sha256(source.encode("utf-8")).hexdigest() and run.source == source
    assert run.steps == 4 and run.absent() == [], run.absent()
    assert run.bytes_code == len(packed) and run.bytes_code_readable == len(source.encode("utf-8"))
    assert ("code_bytes:%d code_bytes_readable:%d limit_bytes:16000000 model_headroom_bytes:%d code_bytes_unstripped:%d"
            % (len(packed), len(source.encode("utf-8")), 16_000_000 - len(packed), len(packed))) in ran.stdout
    assert ran.stdout.index("model_headroom_bytes:") < ran.stdout.index("step:1/4")
    assert "Code size: %d bytes" % len(packed) in ran.stdout and run.bytes_total == run.bytes_model + len(packed)
    shutil.copyfile(log, tmp_path / "train_seed7.log")
    made = subprocess.run([sys.executable, "-m", "records.make", "make", "--name", "Packed", "--author", "a",
                           "--github-id", "g", "--script", str(SCRIPT), "--out", str(tmp_path / "records"),
                           "--date", "2026-11-22", "--skip-import-check", "--track", "track_non_record_16mb",
                           str(tmp_path / "train_seed7.log")],
                          cwd=REPO, env=run_env({}), capture_output=True, text=True, timeout=600)
    folder = tmp_path / "records" / "track_non_record_16mb" / "2026-11-22_Packed"
    assert made.returncode == 0 and "passes" in made.stderr, made.stdout + made.stderr
    assert (folder / "train_gpt.py").read_bytes() == packed
    assert (folder / "train_gpt_readable.py").read_text(encoding="utf-8") == readable
    text = packed.decode("ascii")
    at = text.index('_p="') + 4 + 5000  # a valid base85 character in the middle of the payload
    (folder / "train_gpt.py").write_bytes((text[:at] + ("0" if text[at] != "0" else "1") + text[at + 1:]).encode())
    checked = subprocess.run([sys.executable, "-m", "records.make", "check", "--skip-import-check", str(folder)],
                             cwd=REPO, env=run_env({}), capture_output=True, text=True, timeout=600)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert checked.stdout.startswith("train_gpt.py: the packed source ") and "edited after packing" in checked.stdout


def test_stripped_trainer_keeps_every_line_number_help_and_tracebacks(tmp_path):
    """strip_source drops comments and docstrings but no line: the packed stripped trainer's functions sit on the
    readable file's lines, an exception raised in it names the readable line, --help is unchanged, and it is
    smaller than the packed readable source."""
    readable = read_source(SCRIPT)
    stripped = strip_source(readable)
    assert stripped.count("\n") == readable.count("\n") and strip_source(stripped) == stripped
    assert '"""' not in stripped.split("class Hyperparameters", 1)[0] and "# ==== 9. ARTIFACT" not in stripped
    assert len(pack_source(stripped)) < 0.85 * len(pack_source(readable))
    packed_path = tmp_path / "train_gpt.py"
    write_packed(packed_path, stripped)
    spec = importlib.util.spec_from_file_location("packed_stripped_trainer", packed_path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        with pytest.raises(ValueError, match="CR characters") as info:
            module.pack_source("print(1)\r\n")
        line = info.traceback[-1].lineno + 1  # pytest counts from 0
        assert readable.splitlines()[line - 1].strip().startswith('raise ValueError("pack_source: the source holds CR')
        assert info.traceback[-1].frame.code.raw.co_filename == "<%s>" % packed_path
        readable_module = importlib.util.module_from_spec(importlib.util.spec_from_file_location("readable_t", SCRIPT))
        sys.modules["readable_t"] = readable_module
        readable_module.__spec__.loader.exec_module(readable_module)
        assert module.settings_help() == readable_module.settings_help()
        assert module.GPT.forward.__code__.co_firstlineno == readable_module.GPT.forward.__code__.co_firstlineno
    finally:
        sys.modules.pop(spec.name, None)
        sys.modules.pop("readable_t", None)
