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
exactly and raises ValueError on text encode() cannot produce. Standard library only.
"""

import re

TRANSFORM_NAME = "lossless_caps_caseops_v1"
TITLE, ALLCAPS, CAPNEXT, ESC = "\ue001", "\ue002", "\ue003", "\ue004"
CONTROLS = TITLE + ALLCAPS + CAPNEXT + ESC  # in id order 4..7 of the record's tokenizer (user-defined pieces)

_ENCODE_UNITS = re.compile(r"[A-Za-z]+|[\ue001-\ue004]")
_ASCII_LOWER = frozenset("abcdefghijklmnopqrstuvwxyz")


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


def decode(text: str) -> str:
    """The original text of a CaseOps string; ValueError names the position of anything encode() never writes."""
    out, position, length = [], 0, len(text)
    while position < length:
        char = text[position]
        if char not in CONTROLS:
            out.append(char)
            position += 1
            continue
        following = text[position + 1] if position + 1 < length else ""
        if char == ESC:
            if following == "" or following not in CONTROLS:
                raise ValueError(f"CaseOps text: ESC at {position} is not followed by an operator character")
            out.append(following)
            position += 2
            continue
        if following == "" or following not in _ASCII_LOWER:
            raise ValueError(f"CaseOps text: operator U+{ord(char):04X} at {position} is not followed by a/z")
        if char == ALLCAPS:
            end = position + 1
            while end < length and text[end] in _ASCII_LOWER:
                end += 1
            if end - position - 1 < 2:
                raise ValueError(f"CaseOps text: ALLCAPS at {position} covers fewer than 2 letters")
            out.append(text[position + 1:end].upper())
            position = end
        else:  # TITLE or CAPNEXT: one capital
            out.append(following.upper())
            position += 2
    return "".join(out)


def original_byte_weights(text: str) -> list:
    """For each character of a CaseOps string, the UTF-8 bytes of the original text it stands for: 0 for an
    operator (or an ESC), the character's UTF-8 length otherwise (an escaped operator counts its 3 bytes).
    Their sum is len(decode(text).encode("utf-8"))."""
    weights, escaped = [], False
    for char in text:
        if char in CONTROLS and not escaped:
            weights.append(0)
            escaped = char == ESC
            continue
        weights.append(len(char.encode("utf-8")))
        escaped = False
    return weights


def is_caseops_tokenizer(processor) -> bool:
    """True when a SentencePiece processor has the four operators as pieces (a CaseOps tokenizer)."""
    pieces = {processor.id_to_piece(token_id) for token_id in range(processor.vocab_size())}
    return set(CONTROLS) <= pieces
