"""The rules a record folder must pass before it is submitted; every function returns one line per problem.

A folder `records/<track>/<YYYY-MM-DD>_<Name>/` passes when: README.md, submission.json, train_gpt.py and at least
one log are present; every log is named train_seed<N>.log after the seed it ran and holds one run (a run resumed
from its checkpoints is one run in slices: each later slice resumes from a checkpoint an earlier one saved, with the
same code and the same training settings); every log carries the code_sha256 of the source train_gpt.py runs (a
packed train_gpt.py, records/pack.py, is decoded first: its wrapper must be exactly the packer's and its payload
must decode to the sha256 it states), our file logs its exact source too, and every log's `Code size` is
train_gpt.py's size, the counted bytes; configs agree across seeds in everything but SEED and RUN_ID; every log has
the headline line and a total size <= 16,000,000 bytes; train_gpt.py and the source it runs parse with the Python
3.10 grammar (and compile under a real python3.10 when one exists) and train_gpt.py imports without side effects;
submission.json states the headline mean, the largest seed's bytes and the seeds. Its track (the folder's parent)
adds the challenge's rules for it that the logs can show: on the record track, training <= 600 s and evaluation <=
600 s on 8xH100, and a p < 0.01 improvement of >= 0.005 nats over the previous record (at least 2 seeds); a
non-record track only the byte limit.

What the checker itself lacks (brotli to decode a packed file, a module the submission imports) is raised as
MissingDependency, never reported as a problem of the submission.
"""
import ast
import glob
import hashlib
import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from statistics import mean
from typing import List, Optional, Sequence, Tuple

from records.parse import (HEADLINE_KEYS, SIZE_LIMIT_BYTES, TTT_KEY, SeedRun, choose_headline,
                           config_differences, parse_log)

REQUIRED_FILES = ("README.md", "submission.json", "train_gpt.py")
# The challenge's tracks (its README: "Submission Process", "Non-record Submissions"). The record track's rules that a
# log can show; every track has the 16,000,000-byte limit. A track whose name says non_record (or nonrecord) has no
# other rule: "runs that are not intended to meet the 10-minute cutoff".
RECORD_TRACK = "track_10min_16mb"
TRAIN_LIMIT_MS = 600_000  # "Reproducibly run in under 10 minutes on 8xH100s"
EVAL_LIMIT_MS = 600_000  # "We won't accept submissions that take more than 10 minutes on 8xH100 to evaluate"
RECORD_GPUS, RECORD_GPU_NAME = 8, "H100"
IMPROVEMENT_MARGIN_NATS = 0.005  # "beat the existing SOTA by at least 0.005 nats ... at p < 0.01"
SIGNIFICANCE_LEVEL = 0.01
READABLE_NAME = "train_gpt_readable.py"  # beside a packed train_gpt.py: its source with comments and docstrings
REQUIRED_SUBMISSION_FIELDS = ("name", "author", "github_id", "date", "val_bpb", "val_loss", "bytes_total",
                              "bytes_code")
LOG_NAME = re.compile(r"train_seed(\d+)\.log$")
FOLDER_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})_[A-Za-z0-9][A-Za-z0-9._+-]*$")
IMPORT_TIMEOUT_SECONDS = 300
IMPORT_REPORT_PREFIX = "RECORDS_IMPORT_REPORT "
QUICK_START_PYTHON = "tools/py"  # runs Python in the quick start's environment (./.venv), README's Quick start

# Runs in a child process with CUDA hidden: imports the script like the tests do (registered in sys.modules
# before exec, no bytecode written) with every socket connect and name lookup refused, then reports.
_IMPORT_PROBE = r'''
import importlib.util, json, socket, sys
sys.dont_write_bytecode = True
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args[1:] if args and isinstance(args[0], socket.socket) else args)[:200])
    raise OSError("network disabled by the records import check")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
error = missing_module = None
try:
    spec = importlib.util.spec_from_file_location("submitted_train_gpt", sys.argv[1])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
except BaseException as exc:
    error = "%s: %s" % (type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
    if isinstance(exc, ModuleNotFoundError):
        missing_module = exc.name
report = {"error": error, "missing_module": missing_module, "network": attempts, "process_group": False,
          "cuda": False}
torch = sys.modules.get("torch")
if torch is not None:
    distributed = getattr(torch, "distributed", None)
    report["process_group"] = bool(distributed is not None and distributed.is_available()
                                   and distributed.is_initialized())
    report["cuda"] = bool(torch.cuda.is_initialized())
print("RECORDS_IMPORT_REPORT " + json.dumps(report), flush=True)
'''


class MissingDependency(RuntimeError):
    """The checker's (or maker's) Python lacks a module it needs: the environment's problem, not the folder's."""


def module_available(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # ValueError: a module set to None in sys.modules (blocked)
        return False


def missing_dependency_message(tool: str, modules: Sequence[str], purpose: str = "") -> str:
    return ("%s needs %s%s, which this Python (%s) lacks: run it in the quick start's environment (%s -m %s ...) "
            "or install the project's requirements into this Python (%s -m pip install -r requirements.txt)"
            % (tool, ", ".join(modules), purpose, sys.executable, QUICK_START_PYTHON, tool.split()[0],
               sys.executable))


def require_modules(tool: str, modules: Sequence[str]) -> None:
    """Raise MissingDependency naming every module of `modules` this Python cannot import."""
    missing = [name for name in modules if not module_available(name)]
    if missing:
        raise MissingDependency(missing_dependency_message(tool, missing))


def sha256_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class CountedCode:
    """A submission's train_gpt.py: the counted bytes and the source they run (the bytes themselves, or a packed
    file's decoded payload). `error` says why a packed file's source is unknown."""

    name: str
    data: bytes
    packed: bool
    source: Optional[str] = None
    error: Optional[str] = None
    readable: Optional[str] = None  # the readable file shipped beside a packed one (READABLE_NAME)

    @property
    def source_sha256(self) -> Optional[str]:
        return None if self.source is None else sha256_bytes(self.source.encode("utf-8"))


def counted_code(data: bytes, name: str = "train_gpt.py", tool: str = "records.make check") -> CountedCode:
    try:  # records.pack takes its packer from the repository's train_gpt.py, which imports torch and numpy
        from records.pack import PackError, is_packed
    except ModuleNotFoundError as exc:
        raise MissingDependency(missing_dependency_message(
            tool, [exc.name], " to import train_gpt.py (the repository's, whose pack_source records.pack uses)")) \
            from None

    if not is_packed(data):
        return CountedCode(name, data, packed=False, source=data.decode("utf-8", "replace"))
    require_modules(tool, ["brotli"])
    from records.pack import unpack
    try:
        return CountedCode(name, data, packed=True, source=unpack(data, name))
    except PackError as exc:
        return CountedCode(name, data, packed=True, error=str(exc))


def find_python310() -> Optional[str]:
    """A python3.10 that really runs ($PYTHON310, PATH, pyenv versions); pyenv shims that fail are skipped."""
    candidates = [os.environ.get("PYTHON310", "")]
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        candidates.append(os.path.join(directory, "python3.10"))
    candidates += sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.10*/bin/python3.10")))
    candidates += ["/usr/bin/python3.10", "/usr/local/bin/python3.10"]
    for candidate in candidates:
        if not candidate or not os.access(candidate, os.X_OK):
            continue
        try:
            probe = subprocess.run([candidate, "-c", "import sys; print(sys.version_info[:2])"],
                                   capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.SubprocessError):
            continue
        if probe.returncode == 0 and probe.stdout.strip() == "(3, 10)":
            return candidate
    return None


def grammar_problems(name: str, data: bytes, python310: Optional[str]) -> List[str]:
    """ast with feature_version=(3, 10) catches most 3.11+ syntax; a real python3.10 catches the rest."""
    try:
        ast.parse(data, filename=name, feature_version=(3, 10))
    except SyntaxError as exc:
        return ["%s:%s: does not parse with the Python 3.10 grammar: %s" % (name, exc.lineno, exc.msg)]
    if python310 is None:
        return []
    with tempfile.TemporaryDirectory() as scratch:  # py_compile's default would write __pycache__ next to it
        copy = os.path.join(scratch, "source.py")
        with open(copy, "wb") as handle:
            handle.write(data)
        result = subprocess.run(
            [python310, "-c", "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], "
                              "doraise=True)", copy, os.path.join(scratch, "check.pyc")],
            capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        detail = (result.stderr.strip().splitlines() or ["exit %d" % result.returncode])[-1]
        return ["%s: python3.10 py_compile fails (%s): %s" % (name, python310, detail)]
    return []


def _snapshot(root: Path) -> set:
    return {str(path.relative_to(root)) for path in root.rglob("*")}


def import_problems(script: Path, timeout: int = IMPORT_TIMEOUT_SECONDS) -> List[str]:
    """Imports the script in a child (CUDA hidden, network refused, no launcher env, empty working directory)
    and reports a failure, network use, a process group, CUDA initialisation or any file it creates."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update({"CUDA_VISIBLE_DEVICES": "", "PYTHONDONTWRITEBYTECODE": "1"})
    folder = script.resolve().parent
    before = _snapshot(folder)
    with tempfile.TemporaryDirectory() as scratch:
        try:
            result = subprocess.run([sys.executable, "-c", _IMPORT_PROBE, str(script.resolve())], cwd=scratch,
                                    env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return ["%s: import did not finish within %d s" % (script.name, timeout)]
        created = sorted(_snapshot(Path(scratch)))
    created += sorted(_snapshot(folder) - before)
    problems = []
    reports = [line for line in result.stdout.splitlines() if line.startswith(IMPORT_REPORT_PREFIX)]
    if not reports:
        tail = (result.stderr.strip().splitlines() or ["exit %d" % result.returncode])[-1]
        return ["%s: import check crashed: %s" % (script.name, tail)]
    report = json.loads(reports[-1][len(IMPORT_REPORT_PREFIX):])
    if report["missing_module"]:
        raise MissingDependency(missing_dependency_message(
            "records.make check", [report["missing_module"]], " to import %s (%s)" % (script.name, report["error"])))
    if report["error"]:
        problems.append("%s: import failed: %s" % (script.name, report["error"]))
    if report["network"]:
        problems.append("%s: import tried to open network connections: %s"
                        % (script.name, "; ".join(report["network"][:3])))
    if report["process_group"]:
        problems.append("%s: import initialised a torch.distributed process group" % script.name)
    if report["cuda"]:
        problems.append("%s: import initialised CUDA" % script.name)
    if created:
        problems.append("%s: import created files: %s" % (script.name, ", ".join(created[:5])))
    return problems


def provenance_problems(runs: List[SeedRun], code: CountedCode) -> List[str]:
    """Each log must come from exactly the source `code` runs: the same sha256 (the trainer hashes the UTF-8 text
    it runs), the same embedded source where the log has one, and a `Code size` equal to the counted bytes."""
    if code.error:
        return [code.error]
    digest = code.source_sha256 if code.packed else sha256_bytes(code.data)
    text_digest = sha256_bytes(code.data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
                               .encode("utf-8"))
    readable_bytes = len(code.source.encode("utf-8"))
    what = "the source packed in %s" % code.name if code.packed else code.name
    problems = []
    for run in runs:
        if run.code_sha256 is None:
            problems.append("%s: no code_sha256 line, so it cannot be tied to %s (use the trainer's file log "
                            "logs/<RUN_ID>.txt, not a console copy)" % (run.name, code.name))
            continue
        if run.code_sha256 != digest:
            if not code.packed and run.code_sha256 == text_digest:
                problems.append("%s: %s differs from the script that ran only in its line endings (CR bytes)"
                                % (run.name, code.name))
            elif code.packed and run.code_sha256 == sha256_bytes(code.data):
                problems.append("%s: code_sha256 is the sha256 of the packed %s itself: the trainer that ran hashed "
                                "the file it was started from, not the source it runs (it must read its source "
                                "through linecache, records/pack.py)" % (run.name, code.name))
            else:
                problems.append("%s: code_sha256 %s... differs from %s's %s...: the log comes from another "
                                "version of the script" % (run.name, run.code_sha256[:12], what, digest[:12]))
        if run.source is not None and run.source_sha256() != run.code_sha256:
            problems.append("%s: the source embedded in the log does not hash to its code_sha256 line (edited?)"
                            % run.name)
        if run.bytes_code is not None and run.bytes_code != len(code.data):
            if code.packed and run.bytes_code == readable_bytes:
                problems.append("%s: Code size %d bytes is the readable source's size, but the counted file %s is "
                                "packed (%d bytes): the log comes from a trainer that did not count the packed "
                                "bytes" % (run.name, run.bytes_code, code.name, len(code.data)))
            else:
                problems.append("%s: Code size %d bytes differs from %s's %d bytes"
                                % (run.name, run.bytes_code, code.name, len(code.data)))
    return problems


def resume_free_fields(source: Optional[str]) -> set:
    """The settings a resume may change (the trainer's RESUME_FREE_FIELDS, read from the source that ran); without
    that name, only RESUME itself."""
    try:
        tree = ast.parse(source or "")
    except SyntaxError:
        return {"resume"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "RESUME_FREE_FIELDS"
                                                for t in node.targets):
            words = " ".join(n.value for n in ast.walk(node.value) if isinstance(n, ast.Constant)
                             and isinstance(n.value, str))
            return set(words.split()) | {"resume"}
    return {"resume"}


def slice_problems(run: SeedRun) -> List[str]:
    """Why the slices of a resumed run's log are not one run: each later slice must resume from a checkpoint an earlier
    slice of this log saved, run the same code and train with the same settings."""
    problems, saved = [], {}
    free = resume_free_fields(run.source)
    first = run.slices[0] if run.slices else None
    for current in run.slices:
        label = "%s: slice %d" % (run.name, current.index)
        if current.index > 1 and current.resumed_from is not None:
            if current.code_sha256 != first.code_sha256:
                problems.append("%s ran another version of the script (code_sha256 %s...) than slice 1 (%s...): not "
                                "one run" % (label, (current.code_sha256 or "none")[:12], (first.code_sha256 or
                                                                                          "none")[:12]))
            changed = sorted(key for key in set(first.config) | set(current.config)
                             if key not in free and first.config.get(key) != current.config.get(key))
            if changed:
                problems.append("%s trains with other settings than slice 1 (%s): not one run" % (label, ", ".join(
                    "%s=%s (slice 1: %s)" % (key.upper(), current.config.get(key), first.config.get(key))
                    for key in changed)))
            where = os.path.normpath(current.resumed_from)
            if saved.get(where) != current.resumed_step:
                problems.append("%s resumes from %s (step %d), a checkpoint no earlier slice of this log saved"
                                % (label, current.resumed_from, current.resumed_step))
        saved.update({os.path.normpath(path): step for path, step in current.checkpoints.items()})
    return problems


def seed_and_config_problems(runs: List[SeedRun]) -> List[str]:
    problems = []
    seen = {}
    for run in runs:
        if run.run_count > 1:
            problems.append("%s: holds %d runs (a run was appended to the same logs/<RUN_ID>.txt): a record log must "
                            "hold exactly one run" % (run.name, run.run_count))
        problems += slice_problems(run)
        if not run.config:
            problems.append("%s: no config: lines (use the trainer's file log logs/<RUN_ID>.txt)" % run.name)
        if run.seed is None:
            problems.append("%s: no seed: line" % run.name)
        elif run.config.get("seed") not in (None, str(run.seed)):
            problems.append("%s: seed:%d disagrees with config:seed=%s" % (run.name, run.seed, run.config["seed"]))
        elif run.seed in seen:
            problems.append("seed %d appears twice: %s and %s" % (run.seed, seen[run.seed], run.name))
        else:
            seen[run.seed] = run.name
    if all(run.config for run in runs):
        problems += config_differences(runs)
    return problems


def expected_headline(runs: List[SeedRun], declared: Optional[str]) -> Optional[str]:
    """legal_ttt_exact whenever a log ran TTT (config or score line); else submission.json's metric; else the
    best key all logs share."""
    if any(run.ttt_enabled or TTT_KEY in run.exact for run in runs):
        return TTT_KEY
    return declared or choose_headline(runs).key


def headline_and_size_problems(runs: List[SeedRun], declared: Optional[str]) -> List[str]:
    problems = []
    expected = expected_headline(runs, declared)
    if declared and expected != declared:
        problems.append("submission.json metric is %s but the logs ran TTT: the headline is %s" % (declared, expected))
    for run in runs:
        if expected is None:
            if not any(key in run.exact for key in HEADLINE_KEYS):
                problems.append("%s: no final score line (none of %s), so no headline score: the run did not "
                                "finish" % (run.name, ", ".join(HEADLINE_KEYS)))
        elif expected not in run.exact:
            problems.append("%s: no %s line (the headline score): the run did not finish its evaluation"
                            % (run.name, expected))
        if run.bytes_total is None:
            problems.append("%s: no 'Total submission size' line, so its size is unknown" % run.name)
        elif run.bytes_total > SIZE_LIMIT_BYTES:
            problems.append("%s: total size %d bytes is over the %d-byte cap by %d"
                            % (run.name, run.bytes_total, SIZE_LIMIT_BYTES, run.bytes_total - SIZE_LIMIT_BYTES))
    return problems


def _hardware(run: SeedRun) -> str:
    gpus = run.gpu_names[:run.world_size] if run.world_size else run.gpu_names
    if gpus:
        return "%d×%s" % (len(gpus), " + ".join(sorted(set(gpus))))
    if run.attention_backend and "cpu" in run.attention_backend:
        return "CPU (no GPU)"
    return "unknown hardware (the log has no nvidia-smi output)"


def _eval_ms(run: SeedRun) -> Optional[int]:
    """Our trainer's eval_time line (deserialization to the last score), else the sum of the final evals' times."""
    if run.eval_total_ms is not None:
        return run.eval_total_ms
    finals = [ms for label, ms in run.eval_time_ms.items() if label.startswith(("final_", "legal_ttt", "quantized_ttt"))]
    return sum(finals) if finals else None


def record_track_problems(runs: List[SeedRun], significance: Optional[dict]) -> List[str]:
    """The record track's rules a log can show, one line per broken rule and log. `significance`: the folder's
    submission.json `baseline` (records.make's Welch test against the previous record), or None."""
    problems = []
    rule = "breaks the %s rule" % RECORD_TRACK
    for run in runs:
        gpus = run.gpu_names[:run.world_size] if run.world_size else run.gpu_names
        if not (run.world_size == RECORD_GPUS == len(gpus) and all(RECORD_GPU_NAME in name for name in gpus)):
            hardware = _hardware(run)
            problems.append("%s: %s 'train and evaluate on 8xH100': it ran on %s (world size %s)"
                            % (run.name, rule, hardware, run.world_size))
        # the cap is checked at each step's end, so the step that crosses 600 s ends past it: one step over is the cap
        allowance = run.step_avg_ms or 0.0
        if run.train_time_ms is None:
            problems.append("%s: %s 'training <= 600 s': the log has no step line with train_time" % (run.name, rule))
        elif run.train_time_ms > TRAIN_LIMIT_MS + allowance:
            problems.append("%s: %s 'training <= 600 s': train_time %d ms (the cap allows one step past 600 s, %.0f "
                            "ms here)" % (run.name, rule, run.train_time_ms, allowance))
        eval_ms = _eval_ms(run)
        if eval_ms is None:
            problems.append("%s: %s 'evaluation <= 600 s': the log has no eval time" % (run.name, rule))
        elif eval_ms > EVAL_LIMIT_MS:
            problems.append("%s: %s 'evaluation <= 600 s': its evaluation took %d ms" % (run.name, rule, eval_ms))
    claim = "'beat the previous record by >= %.3f nats at p < %.2f'" % (IMPROVEMENT_MARGIN_NATS, SIGNIFICANCE_LEVEL)
    if len(runs) < 2:
        problems.append("%s %s: %d seed, and a p-value needs at least 2 (one log per seed)" % (rule, claim, len(runs)))
    elif not significance:
        problems.append("%s %s: no significance test against the previous record (records.make make --baseline "
                        "<its folder>)" % (rule, claim))
    elif significance.get("p_value") is None or not significance["p_value"] < SIGNIFICANCE_LEVEL:
        problems.append("%s %s: p = %s against %s" % (rule, claim, significance.get("p_value"), significance.get("dir")))
    return problems


def track_problems(track: str, runs: List[SeedRun], significance: Optional[dict]) -> Tuple[List[str], List[str]]:
    """(problems, notes) of the rules of `track` (the folder records/<track>/ the record goes to)."""
    if track == RECORD_TRACK:
        return record_track_problems(runs, significance), []
    if "non_record" in track or "nonrecord" in track:
        return [], ["%s is a non-record track: of the challenge's rules only the %s-byte limit applies (checked); the "
                    "record track's (training and evaluation <= 600 s on 8xH100, p < %.2f) do not"
                    % (track, "{:,}".format(SIZE_LIMIT_BYTES), SIGNIFICANCE_LEVEL)]
    return ["track %r: not a track this check knows: %s (the record track) or a non-record track, whose name says "
            "non_record" % (track, RECORD_TRACK)], []


def _tolerance(value) -> float:
    """Half a unit of the last decimal written, so a value rounded for display still counts as equal."""
    text = repr(float(value))
    decimals = len(text.split(".")[1]) if "." in text and "e" not in text else 8
    return 0.5 * 10.0 ** -decimals + 1e-12


def submission_problems(submission: dict, runs: List[SeedRun], code: Optional[CountedCode],
                        folder_date: Optional[str]) -> List[str]:
    problems = ["submission.json: missing field %s" % name for name in REQUIRED_SUBMISSION_FIELDS
                if submission.get(name) in (None, "")]
    declared = submission.get("metric")
    if declared is not None and declared not in HEADLINE_KEYS:
        problems.append("submission.json: metric %r is not one of %s" % (declared, ", ".join(HEADLINE_KEYS)))
        declared = None
    key = expected_headline(runs, declared)
    scores = [run.exact[key] for run in runs if key in run.exact] if key else []
    if runs and len(scores) == len(runs):
        for index, field_name in ((1, "val_bpb"), (0, "val_loss")):
            stated = submission.get(field_name)
            headline = mean(score[index] for score in scores)
            if isinstance(stated, (int, float)) and abs(stated - headline) > _tolerance(stated):
                problems.append("submission.json: %s %s is not the headline, the mean %s over %d seeds = %.8f"
                                % (field_name, stated, key, len(scores), headline))
    totals = [run.bytes_total for run in runs if run.bytes_total is not None]
    if totals and isinstance(submission.get("bytes_total"), int) and submission["bytes_total"] != max(totals):
        problems.append("submission.json: bytes_total %d is not the largest seed's total %d"
                        % (submission["bytes_total"], max(totals)))
    code_bytes = len(code.data) if code is not None else None
    stated_code = submission.get("bytes_code")
    if code_bytes is not None and isinstance(stated_code, int) and stated_code != code_bytes:
        problems.append("submission.json: bytes_code %d is not train_gpt.py's size %d"
                        % (submission["bytes_code"], code_bytes))
    log_seeds = sorted(run.seed for run in runs if run.seed is not None)
    if "seeds" in submission and sorted(submission["seeds"] or []) != log_seeds:
        problems.append("submission.json: seeds %s do not match the logs' seeds %s" % (submission["seeds"], log_seeds))
    if folder_date and isinstance(submission.get("date"), str) and not submission["date"].startswith(folder_date):
        problems.append("submission.json: date %s does not match the folder's date %s"
                        % (submission["date"], folder_date))
    return problems


def log_name_problems(folder: Path) -> Tuple[List[str], List[Path]]:
    """(problems, every train log). Any *.log, or a *.txt that reads like a train log, must be
    train_seed<N>.log with N the seed the log ran; misnamed logs still count in the other checks."""
    problems, logs = [], []
    for path in sorted(folder.iterdir()):
        if not path.is_file():
            continue
        is_log = path.suffix == ".log"
        if path.suffix == ".txt":
            head = path.read_text(encoding="utf-8", errors="replace")
            is_log = "code_sha256:" in head or ("step:" in head and "train_loss:" in head)
        if not is_log:
            continue
        logs.append(path)
        match = LOG_NAME.match(path.name)
        if not match:
            problems.append("%s: misnamed log: a train log must be named train_seed<N>.log" % path.name)
            continue
        run = parse_log(path)
        if run.seed is not None and run.seed != int(match.group(1)):
            problems.append("%s: misnamed log: it ran seed %d (name it train_seed%d.log)"
                            % (path.name, run.seed, run.seed))
    return problems, logs


def readable_problems(folder: Path, code: CountedCode) -> List[str]:
    """A packed train_gpt.py ships its readable file, which strip_source must turn into the packed source."""
    from records.pack import read_source, strip_source
    if not code.packed or code.source is None or strip_source(code.source) != code.source:
        return []  # not packed, or packed before stripping: the payload is the readable file (records.pack unpack)
    if not (folder / READABLE_NAME).is_file():
        return ["missing %s: the readable source of the packed train_gpt.py" % READABLE_NAME]
    if strip_source(read_source(folder / READABLE_NAME)) != code.source:
        return ["%s does not give the source packed in train_gpt.py (strip_source of it differs): not the file "
                "that was packed" % READABLE_NAME]
    return []


def check_folder(folder, run_import: bool = True, python310: Optional[str] = "auto") -> Tuple[List[str], List[str]]:
    """(problems, notes) for a record folder; no problems means it is ready to submit."""
    folder = Path(folder)
    if not folder.is_dir():
        return ["%s: no such folder" % folder], []
    notes = []
    problems = ["missing required file %s" % name for name in REQUIRED_FILES if not (folder / name).is_file()]
    name_match = FOLDER_NAME.match(folder.name)
    if not name_match:
        problems.append("folder name %r is not <YYYY-MM-DD>_<Name>" % folder.name)
    name_problems, log_paths = log_name_problems(folder)
    problems += name_problems
    if not log_paths:
        problems.append("no train log (train_seed<N>.log) in the folder")
    runs = [parse_log(path) for path in log_paths]
    script = folder / "train_gpt.py"
    code = counted_code(script.read_bytes(), script.name) if script.is_file() else None
    submission, declared = {}, None
    if (folder / "submission.json").is_file():
        try:
            submission = json.loads((folder / "submission.json").read_text(encoding="utf-8"))
            declared = submission.get("metric") if submission.get("metric") in HEADLINE_KEYS else None
        except (ValueError, UnicodeDecodeError) as exc:
            problems.append("submission.json: not valid JSON (%s)" % exc)
    if runs:
        problems += seed_and_config_problems(runs)
        problems += headline_and_size_problems(runs, declared)
        rules, track_notes = track_problems(folder.resolve().parent.name, runs, submission.get("baseline"))
        problems, notes = problems + rules, notes + track_notes
        if code is not None:
            problems += provenance_problems(runs, code)
    elif code is not None and code.error:
        problems.append(code.error)
    if submission:
        problems += submission_problems(submission, runs, code, name_match.group(1) if name_match else None)
    if code is not None:
        python310 = find_python310() if python310 == "auto" else python310
        if python310 is None:
            notes.append("no python3.10 found: checked the 3.10 grammar with ast feature_version=(3, 10) only")
        problems += grammar_problems(script.name, code.data, python310)
        problems += readable_problems(folder, code)
        if code.packed and code.source is not None:
            problems += grammar_problems("%s (packed source)" % script.name, code.source.encode("utf-8"), python310)
        if run_import:
            problems += import_problems(script)
        else:
            notes.append("import check skipped")
    return problems, notes
