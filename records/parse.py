"""Train logs -> per-seed results.

Reads our trainer's file log (`logs/<RUN_ID>.txt`: `code_sha256:`, the source, versions, nvidia-smi, `config:`
lines, then the challenge's lines of SPEC §9) and the challenge's own logs (torchrun console copies with warning
noise, or file logs that start with the source). Unknown lines are ignored; nothing here raises on a log that
stops early: absent results stay None and `SeedRun.absent()` names them.
"""
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

SIZE_LIMIT_BYTES = 16_000_000  # the challenge's cap on code + compressed model, decimal bytes
SOURCE_END_MARKER = "\n" + "=" * 100 + "\nRunning Python"  # the source block ends at the versions block

# Final scores, best first: the post-TTT score is the headline; without TTT the best score the log has.
# `final_int8_zlib_roundtrip_exact` is the baseline's key; the 2026-03-23 record also printed its int6
# sliding score under it (our trainer does not), so it ranks after the int6 sliding key.
HEADLINE_KEYS = ("legal_ttt_exact", "final_int6_sliding_window_exact", "final_int8_zlib_roundtrip_exact",
                 "final_int6_roundtrip_exact")
TTT_KEY = "legal_ttt_exact"
PRE_TTT_KEYS = ("final_int6_sliding_window_exact", "final_int8_zlib_roundtrip_exact")
ROUNDTRIP_KEYS = ("final_int6_roundtrip_exact", "final_int8_zlib_roundtrip_exact")
IGNORED_CONFIG_KEYS = ("seed", "run_id")  # per run by design; every other field must match across seeds

_NUMBER = r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)"
_VAL_STEP = re.compile(r"step:(\d+)/(\d+) val_loss:(%s) val_bpb:(%s) train_time:(\d+)ms step_avg:(%s)ms"
                       % (_NUMBER, _NUMBER, _NUMBER))
_TRAIN_STEP = re.compile(r"step:(\d+)/(\d+) train_loss:(%s) train_time:(\d+)ms step_avg:(%s)ms"
                         % (_NUMBER, _NUMBER))
_EXACT = re.compile(r"([A-Za-z0-9_]+_exact) val_loss:(%s) val_bpb:(%s)(?:\s|$)" % (_NUMBER, _NUMBER))
_TIMED = re.compile(r"([A-Za-z0-9_]+) val_loss:%s val_bpb:%s .*?eval_time:(\d+)ms" % (_NUMBER, _NUMBER))
_SERIALIZED = re.compile(r"Serialized model (\S+): (\d+) bytes")
_TOTAL = re.compile(r"Total submission size (\S+): (\d+) bytes")
_CODE = re.compile(r"Code size: (\d+) bytes")
_SUBMISSION_BYTES = re.compile(r"submission_bytes code_bytes:(\d+) model_bytes:(\d+) total_bytes:(\d+)")
_CODE_BUDGET = re.compile(r"code_bytes:(\d+) code_bytes_readable:(\d+)")  # before training (trainers that pack their code)
_GPU_ROW = re.compile(r"\|\s+\d+\s+(.+?)\s+(?:On|Off)\s+\|")
_EVAL_TOTAL = re.compile(r"eval_time:(\d+)ms \(")  # our trainer's time from deserialization to the last score
# Each launch writes its header first (our file logs: the code_sha256 line; every file log: the versions block). A
# resumed run (RESUME=, docs/checkpoint.md) appends its next slice to its own log, header and all, and logs
# `resume: step:N/ITER train_time:<ms>ms from:<checkpoint>` before its first step; a header without that line is a
# second run appended to the same logs/<RUN_ID>.txt.
_RUN_HEADER = re.compile(r"^code_sha256:[0-9a-f]{64}$", re.MULTILINE)
_VERSIONS_HEADER = re.compile(r"^Running Python ", re.MULTILINE)
_RESUME = re.compile(r"^resume: step:(\d+)/\d+ train_time:(\d+)ms from:(.+)$", re.MULTILINE)
_CHECKPOINT = re.compile(r"^checkpoint: step:(\d+)/\d+ train_time:\d+ms path:(.+)$", re.MULTILINE)
_STOPPED = re.compile(r"^stopped: .*$", re.MULTILINE)


@dataclass
class Slice:
    """One launch of a run: the first, or a resume of it from a checkpoint (its log's lines appended)."""

    index: int  # 1, 2, ...
    code_sha256: Optional[str] = None
    config: Dict[str, str] = field(default_factory=dict)
    resumed_step: Optional[int] = None  # the checkpoint's step; None for the first slice
    resumed_from: Optional[str] = None
    last_step: Optional[int] = None  # the last step line of the slice
    train_time_ms: Optional[int] = None
    checkpoints: Dict[str, int] = field(default_factory=dict)  # path -> step of each checkpoint it saved
    ended: str = "the log ends"  # its stopped: line, or that it reached the final scores

    def describe(self) -> str:
        start = "steps 0" if self.resumed_step is None else "resumed from %s: steps %d" % (self.resumed_from,
                                                                                           self.resumed_step)
        return "slice %d: %s-%s, train_time %sms; %s" % (self.index, start, self.last_step if self.last_step
                                                         is not None else "?", self.train_time_ms, self.ended)


@dataclass
class SeedRun:
    """Everything one train log says about its run. None means the log has no such line."""

    path: str
    seed: Optional[int] = None
    run_id: Optional[str] = None
    code_sha256: Optional[str] = None
    source: Optional[str] = None  # the script text embedded in our file logs
    python_version: Optional[str] = None
    pytorch_version: Optional[str] = None
    gpu_names: List[str] = field(default_factory=list)
    driver_version: Optional[str] = None
    cuda_version: Optional[str] = None
    attention_backend: Optional[str] = None
    config: Dict[str, str] = field(default_factory=dict)
    world_size: Optional[int] = None
    val_tokens: Optional[int] = None
    val_bytes: Optional[int] = None  # the validation set's UTF-8 bytes (every bpb's denominator)
    tokenizer_sha256: Optional[str] = None  # its first 16 hex digits, as the tokenizer_identity line gives them
    model_params: Optional[int] = None
    train_curve: List[Tuple[int, float]] = field(default_factory=list)  # (step, train_loss)
    val_curve: List[Tuple[int, float, float]] = field(default_factory=list)  # (step, val_loss, val_bpb)
    steps: Optional[int] = None
    iterations: Optional[int] = None
    train_time_ms: Optional[int] = None
    step_avg_ms: Optional[float] = None
    stopped_early: bool = False
    peak_memory_mib: Optional[int] = None
    exact: Dict[str, Tuple[float, float]] = field(default_factory=dict)  # key -> (val_loss, val_bpb)
    eval_time_ms: Dict[str, int] = field(default_factory=dict)  # label (no _exact) -> ms
    bytes_model: Optional[int] = None  # the compressed artifact
    bytes_code: Optional[int] = None  # the counted code (the packed file, for trainers that pack)
    bytes_code_readable: Optional[int] = None  # the readable source, logged next to it before training
    bytes_total: Optional[int] = None  # compressed artifact + code: what the 16,000,000 cap applies to
    artifact_format: Optional[str] = None  # int6+lzma, int8+zlib, ...
    warnings: List[str] = field(default_factory=list)  # WARNING / ERROR / error: lines
    run_count: int = 1  # runs the log holds; more than one means a run was appended to another run's log
    slices: List[Slice] = field(default_factory=list)  # our file logs: the launches of the run (resumes add one)
    eval_total_ms: Optional[int] = None  # our trainer's eval_time line: deserialization to the last score

    @property
    def name(self) -> str:
        return Path(self.path).name

    @property
    def ttt_enabled(self) -> Optional[bool]:
        value = self.config.get("ttt_enabled")
        return None if value is None else value.strip().lower() in ("true", "1")

    def score(self, keys) -> Optional[Tuple[str, float, float]]:
        """(key, val_loss, val_bpb) of the first of `keys` this log has."""
        for key in (keys,) if isinstance(keys, str) else keys:
            if key in self.exact:
                return (key,) + self.exact[key]
        return None

    def source_sha256(self) -> Optional[str]:
        return None if self.source is None else hashlib.sha256(self.source.encode("utf-8")).hexdigest()

    def switched_off(self, name: str) -> bool:
        """The config says the setting `name` (a bool) was off; False when the log does not say."""
        return self.config.get(name, "").strip().lower() in ("false", "0")

    def absent(self) -> List[str]:
        """Human names of the results this log lacks (an eval only when it was not switched off: TTT_ENABLED,
        ROUNDTRIP_EVAL, SLIDING_EVAL)."""
        missing = []
        checks = [
            ("code_sha256 line", self.code_sha256), ("config: lines", self.config or None),
            ("training steps (step: lines)", self.steps), ("artifact bytes (Total submission size ...)",
                                                           self.bytes_total)]
        if not self.switched_off("roundtrip_eval"):
            checks.append(("final round-trip score (final_int6_roundtrip_exact)", self.score(ROUNDTRIP_KEYS)))
        if not self.switched_off("sliding_eval"):
            checks.append(("pre-TTT sliding score (final_int6_sliding_window_exact)", self.score(PRE_TTT_KEYS)))
        if not self.switched_off("ttt_enabled"):
            checks.append(("post-TTT score (legal_ttt_exact)", self.score(TTT_KEY)))
        for label, value in checks:
            if value is None:
                missing.append(label)
        return missing

    def summary(self) -> dict:
        """A JSON-ready digest (curves and config left out)."""
        def rounded(score):
            return None if score is None else {"key": score[0], "val_loss": score[1], "val_bpb": score[2]}
        return {
            "log": self.name, "seed": self.seed, "run_id": self.run_id, "code_sha256": self.code_sha256,
            "steps": self.steps, "iterations": self.iterations, "train_time_ms": self.train_time_ms,
            "step_avg_ms": self.step_avg_ms, "world_size": self.world_size,
            "pre_ttt": rounded(self.score(PRE_TTT_KEYS)), "post_ttt": rounded(self.score(TTT_KEY)),
            "roundtrip": rounded(self.score(ROUNDTRIP_KEYS)), "bytes_model": self.bytes_model,
            "bytes_code": self.bytes_code, "bytes_code_readable": self.bytes_code_readable,
            "bytes_total": self.bytes_total, "python": self.python_version,
            "pytorch": self.pytorch_version, "gpus": self.gpu_names, "absent": self.absent(),
            "runs_in_log": self.run_count, "eval_total_ms": self.eval_total_ms,
            "slices": [slice_.describe() for slice_ in self.slices],
        }


def _split_source(text: str) -> Tuple[Optional[str], str]:
    """(embedded source or None, the text after it). Our file log: `code_sha256:` line, the source, the 100-'='
    line, versions. The challenge's file logs start with the source directly. Console copies have no source."""
    marker = text.find(SOURCE_END_MARKER)
    if marker < 0:
        return None, text
    start = 0
    if text.startswith("code_sha256:"):
        start = text.find("\n") + 1
    return text[start:marker], text[marker + 1:]


def _parse_nvidia_smi(run: SeedRun, lines: List[str]) -> None:
    for line in lines:
        driver = re.search(r"Driver Version:\s*(\S+)", line)
        if driver:
            run.driver_version = driver.group(1)
        cuda = re.search(r"CUDA Version:\s*(\S+)", line)
        if cuda:
            run.cuda_version = cuda.group(1)
        row = _GPU_ROW.match(line)
        if row and "Name" not in row.group(1):
            run.gpu_names.append(row.group(1).strip())


def _parse_line(run: SeedRun, line: str) -> None:
    """One post-source line; the first pattern that matches at the line start wins."""
    match = _VAL_STEP.match(line)
    if match:
        step, total, loss, bpb, train_ms, avg = match.groups()
        run.val_curve.append((int(step), float(loss), float(bpb)))
        run.steps, run.iterations = max(run.steps or 0, int(step)), int(total)
        run.train_time_ms, run.step_avg_ms = int(train_ms), float(avg)
        return
    match = _TRAIN_STEP.match(line)
    if match:
        step, total, loss, train_ms, avg = match.groups()
        run.train_curve.append((int(step), float(loss)))
        run.steps, run.iterations = max(run.steps or 0, int(step)), int(total)
        run.train_time_ms, run.step_avg_ms = int(train_ms), float(avg)
        return
    match = _EXACT.match(line)
    if match:
        run.exact[match.group(1)] = (float(match.group(2)), float(match.group(3)))
        return
    match = _TIMED.match(line)
    if match:
        run.eval_time_ms[match.group(1)] = int(match.group(2))
        return
    if line.startswith("config:") and "=" in line:
        key, _, value = line[len("config:"):].partition("=")
        run.config[key] = value
        return
    _parse_header_line(run, line)


def _parse_header_line(run: SeedRun, line: str) -> None:
    simple = [
        (r"code_sha256:([0-9a-f]{64})$", "code_sha256", str), (r"seed:(\d+)$", "seed", int),
        (r"Running Python (\S+)", "python_version", str), (r"Running PyTorch (\S+)", "pytorch_version", str),
        (r"world_size:(\d+)", "world_size", int), (r"val_loader:.* tokens:(\d+)", "val_tokens", int),
        (r"val_bytes:(\d+)$", "val_bytes", int), (r"tokenizer_identity: sha256 ([0-9a-f]+)", "tokenizer_sha256", str),
        (r"model_params:(\d+)", "model_params", int), (r"attention_backend:(\S+)", "attention_backend", str),
        (r"peak memory allocated: (\d+) MiB", "peak_memory_mib", int),
    ]
    for pattern, attribute, convert in simple:
        match = re.match(pattern, line)
        if match:
            setattr(run, attribute, convert(match.group(1)))
            return
    match = _CODE_BUDGET.match(line)
    if match:
        run.bytes_code, run.bytes_code_readable = int(match.group(1)), int(match.group(2))
        return
    match = _SUBMISSION_BYTES.match(line)
    if match:
        run.bytes_code, run.bytes_model, run.bytes_total = (int(group) for group in match.groups())
        return
    match = _SERIALIZED.match(line)
    if match:
        run.artifact_format, run.bytes_model = match.group(1), int(match.group(2))
        return
    match = _TOTAL.match(line)
    if match:
        run.artifact_format, run.bytes_total = match.group(1), int(match.group(2))
        return
    match = _CODE.match(line)
    if match:
        run.bytes_code = int(match.group(1))
        return
    match = _EVAL_TOTAL.match(line)
    if match:
        run.eval_total_ms = int(match.group(1))
        return
    if line.startswith("stopping_early:"):
        run.stopped_early = True
    elif line.startswith(("WARNING", "ERROR", "error:")):
        run.warnings.append(line)


def _parse_body(run: SeedRun, body: str) -> None:
    lines = body.splitlines()
    smi_start = next((i for i, line in enumerate(lines) if line.startswith("Running PyTorch")), None)
    if smi_start is not None:
        smi_end = next((i for i in range(smi_start + 1, len(lines)) if lines[i] == "=" * 100), len(lines))
        run.gpu_names = []
        _parse_nvidia_smi(run, lines[smi_start + 1:smi_end])
    for line in lines:
        _parse_line(run, line)


def _launches(text: str) -> List[str]:
    """Our file log cut before each code_sha256 line after the first (one piece per launch); other logs whole."""
    starts = [match.start() for match in _RUN_HEADER.finditer(text)]
    if len(starts) < 2 or starts[0] != 0:
        return [text]
    return [text[a:b] for a, b in zip(starts, starts[1:] + [len(text)])]


def parse_log_text(text: str, path: str = "<text>") -> SeedRun:
    """One run from its log. A resumed run's log holds one launch per slice: each is parsed in order, a resume
    dropping the curve points after its checkpoint's step (the steps it trains again), so the results are the run's
    as it ended; the config is the first slice's."""
    run = SeedRun(path=str(path))
    launches = _launches(text)
    for index, launch in enumerate(launches, 1):
        first_line = launch.split("\n", 1)[0]
        piece = SeedRun(path=str(path))
        if first_line.startswith("code_sha256:"):
            _parse_header_line(piece, first_line)
        piece.source, body = _split_source(launch)
        resume = _RESUME.search(body)
        current = Slice(index, code_sha256=piece.code_sha256)
        if resume and index > 1:
            current.resumed_step, current.resumed_from = int(resume.group(1)), resume.group(3).strip()
            run.train_curve = [point for point in run.train_curve if point[0] <= current.resumed_step]
            run.val_curve = [point for point in run.val_curve if point[0] <= current.resumed_step]
        elif index > 1:
            run.run_count += 1
        if index == 1:
            run.code_sha256, run.source = piece.code_sha256, piece.source
            headers = len(_RUN_HEADER.findall(body)) + (1 if first_line.startswith("code_sha256:") else 0)
            run.run_count = max(1, headers, len(_VERSIONS_HEADER.findall(body)))
        config_before = dict(run.config)
        _parse_body(run, body)
        current.config = {key: value for key, value in
                          (line[len("config:"):].partition("=")[::2] for line in body.splitlines()
                           if line.startswith("config:") and "=" in line)}
        if index > 1:
            run.config = config_before  # the run's settings are its first launch's
        steps = [int(match.group(1)) for match in re.finditer(r"^step:(\d+)/\d+ (?:train|val)_loss", body, re.M)]
        times = re.findall(r"^step:\d+/\d+ (?:train|val)_loss:\S+ (?:val_bpb:\S+ )?train_time:(\d+)ms", body, re.M)
        current.last_step = max(steps) if steps else current.resumed_step
        current.train_time_ms = int(times[-1]) if times else None
        current.checkpoints = {match.group(2).strip(): int(match.group(1)) for match in _CHECKPOINT.finditer(body)}
        stopped = _STOPPED.findall(body)
        current.ended = stopped[-1] if stopped else ("it reached the final scores" if any(
            key in body for key in HEADLINE_KEYS) else "the log ends")
        run.slices.append(current)
    if len(launches) == 1 and run.code_sha256 is None:
        run.slices = []  # not our file log: no launches to tell apart
    if run.seed is None and run.config.get("seed", "").isdigit():
        run.seed = int(run.config["seed"])
    run.run_id = run.config.get("run_id")
    return run


def parse_log(path) -> SeedRun:
    with open(path, "r", encoding="utf-8", errors="replace", newline="") as handle:
        return parse_log_text(handle.read(), str(path))


def config_differences(runs: List[SeedRun]) -> List[str]:
    """One line per setting that differs between logs (SEED and RUN_ID are per run). world_size and the
    validation token count are compared too: they change the result as much as a config field."""
    problems = []
    keys = sorted(set().union(*(run.config.keys() for run in runs)) - set(IGNORED_CONFIG_KEYS))
    views = [(key, [run.config.get(key, "<absent>") for run in runs]) for key in keys]
    views.append(("world_size", [str(run.world_size) for run in runs]))
    views.append(("validation tokens", [str(run.val_tokens) for run in runs]))
    for key, values in views:
        if len(set(values)) > 1:
            problems.append("config differs between seeds: %s: %s" % (
                key, ", ".join("%s=%s" % (run.name, value) for run, value in zip(runs, values))))
    return problems


@dataclass
class Headline:
    key: Optional[str]  # None: no final score common to all logs
    note: str  # which score it is, in words
    missing: Dict[str, List[str]]  # log name -> better-ranked keys it lacks


def choose_headline(runs: List[SeedRun], declared: Optional[str] = None) -> Headline:
    """The post-TTT score when every log has it, else the best final score all logs share ('say which').
    `declared` (submission.json's metric) is used when given."""
    if declared:
        candidates = (declared,)
    else:
        candidates = HEADLINE_KEYS
    key = next((k for k in candidates if all(k in run.exact for run in runs)), None)
    rank = HEADLINE_KEYS.index(key) if key in HEADLINE_KEYS else len(HEADLINE_KEYS)
    missing = {run.name: [k for k in HEADLINE_KEYS[:rank] if k not in run.exact] for run in runs}
    missing = {name: keys for name, keys in missing.items() if keys}
    ttt_on = any(run.ttt_enabled for run in runs)
    ttt_off = runs and all(run.ttt_enabled is False for run in runs)
    if key == TTT_KEY:
        note = "post-TTT score (legal_ttt_exact)"
    elif key is None:
        note = "no final score: no %s line is present in every log" % " / ".join(candidates)
    elif ttt_off:
        note = "TTT was off (config ttt_enabled=False): %s, the best final score in the logs" % key
    elif ttt_on:
        note = ("legal_ttt_exact is ABSENT although ttt_enabled=True (%s): falling back to %s"
                % (", ".join(sorted(missing)), key))
    else:
        note = "no legal_ttt_exact line in the logs (TTT off or not run): %s, the best final score present" % key
    return Headline(key, note, missing)
