"""CaseOps (`lossless_caps_caseops_v1`): the 2026-04-27 record's lossless case transform (SPEC_0427 §2).

Capital letters become lowercase letters plus private-use operators, so the tokenizer sees one spelling per
word. Four operators: TITLE (U+E001) capitalises the letter after it, ALLCAPS (U+E002) the rest of the word,
CAPNEXT (U+E003) the letter after it (inside a word), ESC (U+E004) makes the next character literal. A maximal
run w of ASCII letters [A-Za-z] is written as

    w.islower()                          -> w
    len(w) >= 2 and w.isupper()          -> ALLCAPS + lower(w)
    w[0] upper and w[1:].islower()       -> TITLE + lower(w)
    otherwise (mixed case, or "I")       -> [TITLE] lower(w[0]), then [CAPNEXT] before each later capital

e.g. "The NASA Launch" -> TITLE "the " ALLCAPS "nasa " TITLE "launch"; "iPhone OpenAI" -> "i" CAPNEXT "phone "
TITLE "open" CAPNEXT "a" CAPNEXT "i". An operator character already in the text is escaped (ESC + it); every
other character (digits, punctuation, whitespace, non-ASCII letters) is copied. decode() inverts encode()
exactly; it raises ValueError on an operator not followed by what encode() writes after it. Standard library
only.
"""

import re

TRANSFORM_NAME = "lossless_caps_caseops_v1"
TITLE, ALLCAPS, CAPNEXT, ESC = "\ue001", "\ue002", "\ue003", "\ue004"
CONTROLS = TITLE + ALLCAPS + CAPNEXT + ESC  # in id order 4..7 of the record's tokenizer (user-defined pieces)

_ENCODE_UNITS = re.compile(r"[A-Za-z]+|[\ue001-\ue004]")
# What encode() writes after an operator: ESC + any operator, ALLCAPS + a run of 2+ letters (the whole rest of
# the word: a maximal run), TITLE or CAPNEXT + one letter; an operator anywhere else is an error.
_DECODE_UNITS = re.compile("\ue004([\ue001-\ue004])|\ue002([a-z]{2,})|[\ue001\ue003]([a-z])|[\ue001-\ue004]")


def _encode_unit(match) -> str:
    unit = match.group()
    if unit in CONTROLS:
        return ESC + unit
    if unit.islower():
        return unit
    if len(unit) >= 2 and unit.isupper():
        return ALLCAPS + unit.lower()
    if unit[1:].islower():
        return TITLE + unit.lower()
    head = (TITLE if unit[0].isupper() else "") + unit[0].lower()
    return head + "".join(CAPNEXT + letter.lower() if letter.isupper() else letter for letter in unit[1:])


def encode(text: str) -> str:
    """The CaseOps form of `text`."""
    return _ENCODE_UNITS.sub(_encode_unit, text)


def _decode_unit(match) -> str:
    escaped, allcaps, capital = match.group(1, 2, 3)
    if escaped:
        return escaped
    if allcaps or capital:
        return (allcaps or capital).upper()
    raise ValueError(f"CaseOps text: operator U+{ord(match.group()):04X} at {match.start()} is not followed by "
                     "what encode() writes after it")


def decode(text: str) -> str:
    """The original text of a CaseOps string; ValueError names the position of a misplaced operator."""
    return _DECODE_UNITS.sub(_decode_unit, text)


def is_caseops_tokenizer(processor) -> bool:
    """True when a SentencePiece processor has the four operators as pieces (a CaseOps tokenizer)."""
    pieces = {processor.id_to_piece(token_id) for token_id in range(processor.vocab_size())}
    return set(CONTROLS) <= pieces
