"""SentencePiece tokenizer: train with the challenge's settings (SPEC §2), load and check, read settings.

Training reads whole documents as SentencePiece "sentences" (NUL -> space, stripped, empties skipped),
exactly as the challenge's exporter does. SentencePiece's default max_sentence_length (4192 bytes) is
kept, so longer documents are left out of *training* (not of encoding), as in the challenge.
The model is written through `model_writer`, so no temp path ends up inside the model proto: the same
documents give a byte-identical .model file.
"""

import io
import struct
from pathlib import Path

from data.fileio import atomic_write_bytes

# The challenge's SentencePiece trainer settings (SPEC §2), besides vocab_size.
SPEC_TRAINER_SETTINGS = {
    "model_type": "bpe",
    "character_coverage": 0.999,
    "byte_fallback": True,
    "split_digits": True,
    "normalization_rule_name": "nmt_nfkc",
    "add_dummy_prefix": False,
    "pad_id": 0,
    "bos_id": 1,
    "eos_id": 2,
    "unk_id": 3,
    "hard_vocab_limit": False,
}

# Field numbers in sentencepiece_model.proto, for reading settings back without protobuf installed.
_MODEL_TRAINER_SPEC, _MODEL_NORMALIZER_SPEC = 2, 3
_TRAINER_FIELDS = {
    3: "model_type",
    4: "vocab_size",
    10: "character_coverage",
    25: "split_digits",
    33: "hard_vocab_limit",
    35: "byte_fallback",
    40: "unk_id",
    41: "bos_id",
    42: "eos_id",
    43: "pad_id",
}
_NORMALIZER_FIELDS = {1: "normalization_rule_name", 3: "add_dummy_prefix"}
# proto2 omits fields left at their declared default; these are the .proto defaults.
_PROTO_DEFAULTS = {
    "model_type": 1,
    "vocab_size": 8000,
    "character_coverage": 0.9995,
    "split_digits": 0,
    "hard_vocab_limit": 1,
    "byte_fallback": 0,
    "unk_id": 0,
    "bos_id": 1,
    "eos_id": 2,
    "pad_id": -1,
    "add_dummy_prefix": 1,
}
_MODEL_TYPES = {1: "unigram", 2: "bpe", 3: "word", 4: "char"}
_BOOL_SETTINGS = ("split_digits", "hard_vocab_limit", "byte_fallback", "add_dummy_prefix")


class TokenizerError(ValueError):
    """An unusable tokenizer (missing, corrupt, wrong vocab size, no BOS); the message names the file."""


def training_text(text: str):
    """The text the trainer sees for one document, or None to skip it."""
    cleaned = text.replace("\x00", " ").strip()
    return cleaned or None


def train_tokenizer(texts, vocab_size: int, label: str = "tokenizer", user_defined_symbols: str = "") -> bytes:
    """Train a BPE model on an iterable of document texts; returns the serialized .model. Each character of
    `user_defined_symbols` becomes a piece of its own, ids 4, 5, ... (CaseOps' operators, SPEC_0427 §2)."""
    import sentencepiece as spm

    sentences = (cleaned for cleaned in map(training_text, texts) if cleaned is not None)
    model = io.BytesIO()
    extra = {"user_defined_symbols": list(user_defined_symbols)} if user_defined_symbols else {}
    try:
        spm.SentencePieceTrainer.train(
            sentence_iterator=sentences,
            model_writer=model,
            vocab_size=vocab_size,
            minloglevel=2,
            **SPEC_TRAINER_SETTINGS,
            **extra,
        )
    except RuntimeError as error:
        raise TokenizerError(f"{label}: SentencePiece training failed ({error})") from error
    return model.getvalue()


def save_tokenizer(model_bytes: bytes, model_path: Path) -> None:
    """Write `<name>.model` and its human-readable `<name>.vocab` atomically."""
    import sentencepiece as spm

    processor = spm.SentencePieceProcessor(model_proto=model_bytes)
    model_path = Path(model_path)
    atomic_write_bytes(model_path, model_bytes)
    atomic_write_bytes(model_path.with_suffix(".vocab"), vocab_file_bytes(processor))


def vocab_file_bytes(processor) -> bytes:
    """The `.vocab` companion: one `piece<TAB>score` line per id, like spm_train writes."""
    lines = [f"{processor.id_to_piece(i)}\t{processor.get_score(i):g}\n" for i in range(processor.vocab_size())]
    return "".join(lines).encode("utf-8")


def tokenizer_from_bytes(model_bytes: bytes, vocab_size: int, label: str):
    """Parse a .model and check it fits the shards: the requested vocab size and a BOS piece."""
    import sentencepiece as spm

    try:
        processor = spm.SentencePieceProcessor(model_proto=model_bytes)
    except (RuntimeError, OSError) as error:
        raise TokenizerError(f"{label}: not a SentencePiece model ({error})") from error
    if processor.vocab_size() != vocab_size:
        raise TokenizerError(
            f"{label}: tokenizer vocab size {processor.vocab_size()} differs from --vocab-size {vocab_size}"
        )
    if processor.bos_id() < 0:
        raise TokenizerError(f"{label}: tokenizer has no BOS piece (shards need BOS before every document)")
    return processor


def load_tokenizer(model_path: Path, vocab_size: int):
    """Load and check a .model file. Returns (processor, model_bytes)."""
    model_path = Path(model_path)
    if not model_path.is_file():
        raise TokenizerError(f"{model_path}: tokenizer model not found")
    model_bytes = model_path.read_bytes()
    return tokenizer_from_bytes(model_bytes, vocab_size, str(model_path)), model_bytes


def tokenizer_vocab_size(model_path: Path) -> int:
    """The vocabulary size of a .model file."""
    import sentencepiece as spm

    model_path = Path(model_path)
    if not model_path.is_file():
        raise TokenizerError(f"{model_path}: tokenizer model not found")
    try:
        return spm.SentencePieceProcessor(model_file=str(model_path)).vocab_size()
    except (RuntimeError, OSError) as error:
        raise TokenizerError(f"{model_path}: not a SentencePiece model ({error})") from error


def settings_differences(settings: dict, vocab_size: int) -> list:
    """Human-readable differences between a model's settings and the SPEC's (empty when they match)."""
    wanted = dict(SPEC_TRAINER_SETTINGS, vocab_size=vocab_size)
    differences = []
    for key, value in wanted.items():
        actual = settings.get(key)
        if key == "character_coverage" and actual is not None:
            matches = abs(actual - value) < 1e-6
        else:
            matches = actual == value
        if not matches:
            differences.append(f"{key}={actual!r} (SPEC: {value!r})")
    return differences


def model_settings(model_bytes: bytes) -> dict:
    """Read the trainer/normalizer settings stored in a .model (a protobuf) with a minimal wire reader."""
    settings = dict(_PROTO_DEFAULTS)
    for field, _, value in _proto_fields(model_bytes):
        if field == _MODEL_TRAINER_SPEC:
            settings.update(_named_fields(value, _TRAINER_FIELDS))
        elif field == _MODEL_NORMALIZER_SPEC:
            settings.update(_named_fields(value, _NORMALIZER_FIELDS))
    if "model_type" in settings:
        settings["model_type"] = _MODEL_TYPES.get(settings["model_type"], settings["model_type"])
    if isinstance(settings.get("normalization_rule_name"), bytes):
        settings["normalization_rule_name"] = settings["normalization_rule_name"].decode("utf-8")
    for key in _BOOL_SETTINGS:
        if key in settings:
            settings[key] = bool(settings[key])
    return settings


def _named_fields(message: bytes, names: dict) -> dict:
    found = {}
    for field, wire_type, value in _proto_fields(message):
        if field not in names:
            continue
        if wire_type == 5:
            value = round(struct.unpack("<f", value)[0], 6)
        elif wire_type == 0 and value >= 1 << 63:
            value -= 1 << 64  # negative int32 ids (e.g. -1 = disabled) are sign-extended varints
        found[names[field]] = value
    return found


def _proto_fields(message: bytes):
    """Yield (field number, wire type, value) for each field of a serialized protobuf message."""
    position = 0
    while position < len(message):
        key, position = _varint(message, position)
        field, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, position = _varint(message, position)
        elif wire_type == 1:
            value, position = message[position : position + 8], position + 8
        elif wire_type == 2:
            length, position = _varint(message, position)
            value, position = message[position : position + length], position + length
        elif wire_type == 5:
            value, position = message[position : position + 4], position + 4
        else:
            raise TokenizerError(f"unsupported protobuf wire type {wire_type} in tokenizer model")
        yield field, wire_type, value


def _varint(message: bytes, position: int):
    result, shift = 0, 0
    while True:
        if position >= len(message):
            raise TokenizerError("truncated protobuf in tokenizer model")
        byte = message[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
