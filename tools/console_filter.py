"""What run.sh shows on the terminal of a job's output: every line but torchrun's own noise.

    JOB | python tools/console_filter.py

The console log (logs/<RUN_ID>.console.txt) keeps every line; the terminal skips what only repeats, in torchrun's
words, what the trainer already said in one line (`error: <reason>`, `stopped: SIGINT ...`) and run.sh's last line
says again: torchrun's log lines (`W1129 04:29:56.123000 5598 .../run.py:792] ...`, E and I alike) and, once the job
has ended, its own traceback (ChildFailedError, SignalException) with the failure report after it. torchrun's
traceback is told from a rank's by its first frame: torchrun runs as `python -m torch.distributed.run`, so its
traceback starts in runpy or in torch.distributed; a rank's starts in train_gpt.py and is shown (a bug's report).
An `error:` line the same as one shown already (every rank names a configuration error) is not repeated. Lines pass
through one at a time, as they come.
"""
import re
import sys

TORCH_LOG_LINE = re.compile(rb"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]")
TRACEBACK = b"Traceback (most recent call last):"
TORCHRUN_FRAME = re.compile(rb'^  File "(<frozen runpy>|[^"]*[/\\]runpy\.py|[^"]*torch[/\\]distributed[/\\][^"]*)"')


def show(stdin, stdout) -> None:
    held = None  # a Traceback line, shown or dropped with the traceback its next line starts
    errors = set()
    for line in iter(stdin.readline, b""):
        if held is not None:
            if TORCHRUN_FRAME.match(line):  # torchrun's report: everything from here on is the console log's only
                return
            stdout.write(held)
            held = None
        if line.rstrip(b"\r\n") == TRACEBACK:
            held = line
            continue
        if TORCH_LOG_LINE.match(line):
            continue
        if line.startswith(b"error: "):
            if line in errors:
                continue
            errors.add(line)
        stdout.write(line)
        stdout.flush()
    if held is not None:
        stdout.write(held)
        stdout.flush()


def main() -> int:
    stdin = sys.stdin.buffer
    try:
        show(stdin, sys.stdout.buffer)
    except OSError:  # the terminal went away (a hangup): the console log is tee's, which must not block on us
        pass
    for _ in iter(stdin.readline, b""):  # read to the end, so the job never waits on a full pipe
        pass
    try:
        sys.stdout.close()
    except OSError:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
