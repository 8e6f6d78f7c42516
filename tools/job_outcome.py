"""run.sh's last line: how a torchrun job of train_gpt.py ended, read from its console output.

    python tools/job_outcome.py CONSOLE_LOG TORCHRUN_STATUS SECONDS

prints two lines: the exit status run.sh should end with, then the line for the user. On a failure the
reason is, in this order: the job's first `error: <reason>` line (the trainer's own words; indented lines right
after it continue it), else torchrun's "Root Cause" summary of the first failing rank (the signal that killed
it, or the last line of the traceback that torch's @record wrote), else the signal that killed torchrun, else a
pointer to the output. The status is the failing rank's exit code when torchrun reports it (128 + N for a rank
killed by signal N; torchrun itself exits 1 for any failed rank), else torchrun's.
"""
import re
import signal
import sys
from typing import List, Optional, Tuple

RANK_PREFIX = re.compile(r"^\[rank\d+\]:\s?")  # torch's prefix on a rank's uncaught-exception lines
FIELD = re.compile(r"^  (\w+)\s*: ?(.*)$")  # "  exitcode  : 2 (pid: 123) " in torchrun's summary
KILLED = re.compile(r"^Signal (\d+) \((\w+)\) received by PID")
IGNORED = re.compile(r"^WARNING unknown_env: (\S+) is not a setting of this script and is IGNORED"
                     r"( \(did you mean \w+\?\))?")


def first_error(lines: List[str]) -> Optional[str]:
    for index, line in enumerate(lines):
        line = RANK_PREFIX.sub("", line)
        if line.startswith("error: "):
            parts = [line[len("error: "):].strip()]
            for more in lines[index + 1:]:
                if not re.match(r"^  \S", more):
                    break
                parts.append(more.strip())
            return parts[0] + (" " + "; ".join(parts[1:]) if len(parts) > 1 else "")
    return None


def root_cause(lines: List[str]) -> dict:
    """The fields of torchrun's "Root Cause (first observed failure)" block; `traceback` keeps its
    continuation lines."""
    try:
        start = next(i for i, line in enumerate(lines) if line.startswith("Root Cause (first observed failure)"))
    except StopIteration:
        return {}
    fields, key = {}, None
    for line in lines[start + 1:]:
        if line.startswith("====="):
            break
        match = FIELD.match(line)
        if match and key != "traceback":
            key = match.group(1)
            fields[key] = [match.group(2).rstrip()]
        elif key is not None:
            fields[key].append(line.rstrip())
    return fields


def failure(lines: List[str], torchrun_status: int, console: str) -> Tuple[int, str]:
    cause = root_cause(lines)
    status = torchrun_status
    exit_match = re.match(r"(-?\d+)", cause.get("exitcode", [""])[0])
    if exit_match and int(exit_match.group(1)) != 0:
        code = int(exit_match.group(1))
        status = code if code > 0 else 128 - code
    rank = cause.get("rank", ["?"])[0].split(" ")[0]
    reason = first_error(lines)
    traceback = cause.get("traceback", [""])
    killed = KILLED.match(traceback[0])
    if reason is None and killed:
        reason = "rank %s was killed by %s (signal %s)" % (rank, killed.group(2), killed.group(1))
        if int(killed.group(1)) == signal.SIGKILL:
            reason += ": without a message that is most often the kernel's out-of-memory killer (dmesg says)"
    elif reason is None and traceback[0].startswith("Traceback"):
        last = [line.strip() for line in traceback[1:] if re.match(r"^  \S", line)]
        if last:
            reason = "rank %s: %s" % (rank, last[-1])
    if reason is None and not cause and torchrun_status > 128:  # no summary: torchrun itself was killed
        number = torchrun_status - 128
        name = signal.Signals(number).name if number in signal.valid_signals() else "signal %d" % number
        reason = "torchrun was killed by %s (signal %d)" % (name, number)
    if reason is None:
        reason = "the trainer printed no reason; the output above is also in %s" % console
    return status, "run.sh: FAILED (exit %d): %s" % (status, reason)


def ignored_settings(lines: List[str]) -> str:
    """"; IGNORED: NUM_LAYER=3 (did you mean NUM_LAYERS?)" from the trainer's unknown_env warnings, or ""."""
    found = []
    for line in lines:
        match = IGNORED.match(line)
        if match and match.group(1) + (match.group(2) or "") not in found:
            found.append(match.group(1) + (match.group(2) or ""))
    return "; IGNORED (not settings): " + ", ".join(found) if found else ""


def outcome(lines: List[str], torchrun_status: int, seconds: int, console: str) -> Tuple[int, str]:
    if torchrun_status != 0:
        status, line = failure(lines, torchrun_status, console)
        return status, line + ignored_settings(lines)
    logs = [console] + [line[len("logfile:"):].strip() for line in lines if line.startswith("logfile:")][:1]
    return 0, "run.sh: done in %d:%02d; logs: %s%s" % (seconds // 60, seconds % 60, ", ".join(reversed(logs)),
                                                      ignored_settings(lines))


def main(argv: List[str]) -> int:
    console, torchrun_status, seconds = argv[1], int(argv[2]), int(argv[3])
    with open(console, "r", encoding="utf-8", errors="replace") as handle:
        lines = handle.read().splitlines()
    status, line = outcome(lines, torchrun_status, seconds, console)
    print(status)
    print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
