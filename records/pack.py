"""The counted form of train_gpt.py: its readable source, brotli-compressed and base85-encoded inside a short
ASCII wrapper that runs it exactly like the readable file.

    tools/py -m records.pack pack train_gpt.py -o packed/train_gpt.py   readable source -> counted file
    tools/py -m records.pack unpack packed/train_gpt.py [-o source.py]  counted file -> source (sha256 on stderr)
    tools/py -m records.pack verify packed/train_gpt.py                 exit 1 with the reason unless intact

The same source always packs to the same bytes: every compressor setting is fixed and nothing else (no
timestamp, no path) enters the file. brotli quality 11 was chosen by measurement on train_gpt.py (147,041 B):
brotli 37,057 B, lzma raw LZMA2 preset 9e with pb=0 38,214 B (xz container, preset 6: 38,348 B), zlib level 9
42,853 B; base85 costs 5/4 (base64 4/3; a latin-1 string literal would cost ~1.02, but then the file is not
ASCII and breaks tools that read code as UTF-8). brotli 1.0.9, 1.1.0 and 1.2.1 give identical bytes, while
lzma's bytes depend on the system's liblzma. The wrapper needs `brotli`, which the artifact needs anyway.

How the wrapper makes the payload run like the file: the source is compiled under the file name "<FILE>" and
its lines are registered in linecache under that name, so inspect finds every function's source (Triton's
@jit and torch.library.triton_op read it; a plain exec makes Triton refuse "@jit functions should be defined
in a Python file") and tracebacks show the readable lines; run as a script it sets sys.excepthook to the
traceback module's printer, because CPython's built-in printer reads lines from disk, not from linecache. It
runs the payload in its own module namespace, so `__name__ == "__main__"`, `@dataclass` (which looks the module
up in sys.modules) and pickling behave as in the readable file. The payload's sha256 is written in the
wrapper and checked before anything runs: an edited file stops with one line naming it.

The template and pack_source live in train_gpt.py, which logs len(pack_source(source)) as its counted code_bytes;
it reads the source it runs (for code_sha256, the log and those bytes) through linecache under its code's file
name (read_own_source): the packed file registered it there, and for a readable file linecache reads it from disk.
"""
import argparse
import base64
import hashlib
import re
import sys
import tokenize
from pathlib import Path

# The one packer: train_gpt.py logs len(pack_source(its source)) as its counted code_bytes, so the file records.make
# writes and the bytes every log states come from the same function (importing train_gpt has no side effects). It
# is the repository's train_gpt.py, next to this package, not one in the working directory (a record folder's).
_REPO = str(Path(__file__).resolve().parents[1])
if sys.path[:1] != [_REPO]:
    sys.path.insert(0, _REPO)
from train_gpt import PACKED_TEMPLATE, pack_source, strip_source  # noqa: E402


class PackError(ValueError):
    """A file that is not an intact packed file; the message starts with the file's name."""


_HEAD, _, _REST = PACKED_TEMPLATE.partition("{sha256}")
_MIDDLE, _, _TAIL = _REST.partition("{payload}")
_PACKED = re.compile(re.escape(_HEAD) + "([0-9a-f]{64})" + re.escape(_MIDDLE) + "([^\"\\\\\n]*)" + re.escape(_TAIL),
                     re.DOTALL)
_FIRST_LINE = PACKED_TEMPLATE.split("\n", 1)[0].encode("ascii")


def is_packed(data: bytes) -> bool:
    """True for a file that starts like our packed files (its wrapper and payload may still be broken)."""
    return data.startswith(_FIRST_LINE)


def unpack(data: bytes, name: str) -> str:
    """The source a packed file runs. Raises PackError naming `name` unless the wrapper is exactly ours and the
    payload decodes to the source of the sha256 the wrapper states."""
    import brotli

    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise PackError("%s: not a packed file (it has non-ASCII bytes)" % name) from None
    match = _PACKED.fullmatch(text)
    if match is None:
        raise PackError("%s: not a packed file of records.pack, or its wrapper was edited (it differs from the "
                        "packer's template)" % name)
    stated_sha256, payload = match.groups()
    try:
        source = brotli.decompress(base64.b85decode(payload)).decode("utf-8")
    except (ValueError, brotli.error) as exc:
        raise PackError("%s: the packed source does not decode (%s: %s): the file was edited after packing"
                        % (name, type(exc).__name__, exc)) from None
    if base64.b85encode(base64.b85decode(payload)).decode("ascii") != payload:  # an edit base85 would ignore
        raise PackError("%s: the packed source does not decode from canonical base85: the file was edited after "
                        "packing" % name)
    if hashlib.sha256(source.encode("utf-8")).hexdigest() != stated_sha256:
        raise PackError("%s: the packed source is not the one of sha256 %s its wrapper states: the file was edited "
                        "after packing" % (name, stated_sha256))
    return source


def read_source(path) -> str:
    """A readable file's text exactly as the trainer reads its own source (linecache: tokenize.open, so the coding
    cookie or BOM decides the encoding and newlines are universal)."""
    with tokenize.open(path) as handle:
        return handle.read()


def sha256_text(source: str) -> str:
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


def _pack(args) -> int:
    with open(args.source, "rb") as handle:
        if is_packed(handle.read()):
            print("error: %s is already packed" % args.source, file=sys.stderr)
            return 2
    try:
        source = read_source(args.source)
        packed = pack_source(strip_source(source))  # the counted file: comments and docstrings dropped, lines kept
    except (SyntaxError, ValueError) as exc:  # a bad coding cookie, undecodable text, CR line breaks
        print("error: %s: %s" % (args.source, exc), file=sys.stderr)
        return 2
    with open(args.output, "wb") as handle:
        handle.write(packed)
    print("%s: %d bytes (source %s: %d bytes, sha256 %s)" % (args.output, len(packed), args.source,
                                                             len(source.encode("utf-8")), sha256_text(source)))
    return 0


def _unpack(args) -> int:
    with open(args.packed, "rb") as handle:
        source = unpack(handle.read(), args.packed)
    if args.output:
        with open(args.output, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(source)
    else:
        sys.stdout.write(source)
    print("sha256 %s (%d bytes)" % (sha256_text(source), len(source.encode("utf-8"))), file=sys.stderr)
    return 0


def _verify(args) -> int:
    with open(args.packed, "rb") as handle:
        data = handle.read()
    source = unpack(data, args.packed)
    print("%s: intact packed file, %d bytes; source %d bytes, sha256 %s"
          % (args.packed, len(data), len(source.encode("utf-8")), sha256_text(source)))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tools/py -m records.pack", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    pack = commands.add_parser("pack", help="readable source -> packed file")
    pack.add_argument("source", help="the readable train_gpt.py")
    pack.add_argument("-o", "--output", required=True, help="the packed file to write")
    unpack_command = commands.add_parser("unpack", help="packed file -> its source (stdout or -o), sha256 on stderr")
    unpack_command.add_argument("packed")
    unpack_command.add_argument("-o", "--output", help="write the source here instead of stdout")
    verify = commands.add_parser("verify", help="check that a packed file is intact; print its source's sha256")
    verify.add_argument("packed")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import brotli  # noqa: F401 (the commands need it; say so before anything else)
    except ImportError:
        print("error: records.pack needs brotli, which this Python (%s) lacks: run it in the quick start's environment "
              "(tools/py -m records.pack ...) or pip install brotli" % sys.executable, file=sys.stderr)
        return 2
    try:
        return {"pack": _pack, "unpack": _unpack, "verify": _verify}[args.command](args)
    except (PackError, OSError) as exc:  # PackError and OSError messages name the file
        print("error: %s" % exc, file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
