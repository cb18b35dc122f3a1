"""Check a SenseVoice model directory (sherpa-onnx format) before anything loads it.

sherpa-onnx terminates the whole process when a metadata key is missing, and silently returns
empty text when inputs have the wrong type.  So every fact sherpa relies on is checked here
first, and a broken model becomes a :class:`ModelError` that names the file and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kitt_stt.asr.onnx_header import OnnxHeader, OnnxHeaderError, read_onnx_header

MODEL_FILES = ("model.int8.onnx", "model.onnx")
TOKENS_FILE = "tokens.txt"
INTEGER_KEYS = (
    "vocab_size",
    "lfr_window_size",
    "lfr_window_shift",
    "normalize_samples",
    "with_itn",
    "without_itn",
    "lang_auto",
    "lang_zh",
    "lang_en",
    "lang_ja",
    "lang_ko",
    "lang_yue",
)
VECTOR_KEYS = ("neg_mean", "inv_stddev")
LANGUAGES = ("auto", "zh", "en", "ja", "ko", "yue")
EXPECTED_INPUTS = (("x", "float", 3), ("x_length", "int32", 1), ("language", "int32", 1), ("text_norm", "int32", 1))
FEATURE_DIM = 80


class ModelError(Exception):
    """A model directory that cannot be used, with a message saying why and what to do."""


@dataclass(frozen=True)
class SenseVoiceModel:
    directory: Path
    model_path: Path
    tokens_path: Path
    vocab_size: int
    metadata: dict[str, str]

    @property
    def name(self) -> str:
        return self.directory.name


def find_model_file(directory: Path, prefer_int8: bool = True) -> Path:
    names = MODEL_FILES if prefer_int8 else tuple(reversed(MODEL_FILES))
    for name in names:
        if (directory / name).is_file():
            return directory / name
    raise ModelError(
        f"{directory}: no {' or '.join(MODEL_FILES)} found; a SenseVoice model directory holds the "
        f"ONNX model and {TOKENS_FILE} (see docs/models.md)"
    )


def read_model_header(path: Path) -> OnnxHeader:
    """The ONNX header (metadata, inputs, outputs) without the weights; unreadable -> ModelError."""
    try:
        return read_onnx_header(path)
    except OnnxHeaderError as exc:
        raise ModelError(str(exc)) from None


def read_tokens(path: Path) -> list[str]:
    if not path.is_file():
        raise ModelError(f"{path}: missing; a SenseVoice model directory needs its {TOKENS_FILE}")
    symbols: dict[int, str] = {}
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        parts = line.rsplit(maxsplit=1)
        if len(parts) != 2 or not parts[1].lstrip("-").isdigit():
            raise ModelError(f"{path}:{number}: expected '<token> <id>', got {line[:60]!r}")
        symbols[int(parts[1])] = parts[0]
    if not symbols:
        raise ModelError(f"{path}: no tokens")
    if sorted(symbols) != list(range(len(symbols))):
        raise ModelError(f"{path}: token ids must be 0..{len(symbols) - 1} without gaps")
    return [symbols[index] for index in range(len(symbols))]


def _check_metadata(path: Path, metadata: dict[str, str]) -> int:
    missing = [key for key in (*INTEGER_KEYS, *VECTOR_KEYS) if key not in metadata]
    if missing:
        raise ModelError(
            f"{path}: not a sherpa-onnx SenseVoice model: metadata key(s) {', '.join(missing)} missing "
            "(sherpa-onnx would terminate the process on this model)"
        )
    values: dict[str, int] = {}
    for key in INTEGER_KEYS:
        try:
            values[key] = int(metadata[key])
        except ValueError:
            raise ModelError(f"{path}: metadata {key}={metadata[key][:40]!r} is not an integer") from None
    if values["vocab_size"] <= 0 or values["lfr_window_size"] <= 0 or values["lfr_window_shift"] <= 0:
        raise ModelError(f"{path}: vocab_size, lfr_window_size and lfr_window_shift must be positive")
    dim = FEATURE_DIM * values["lfr_window_size"]
    for key in VECTOR_KEYS:
        try:
            vector = [float(item) for item in metadata[key].split(",")]
        except ValueError:
            raise ModelError(f"{path}: metadata {key} must be comma-separated numbers") from None
        if len(vector) != dim:
            raise ModelError(f"{path}: metadata {key} has {len(vector)} values, expected {dim}")
    return values["vocab_size"]


def _check_signature(path: Path, header_inputs: list, header_outputs: list) -> None:
    if len(header_inputs) < len(EXPECTED_INPUTS):
        raise ModelError(f"{path}: expected 4 inputs (x, x_length, language, text_norm), found {len(header_inputs)}")
    for spec, (name, dtype, rank) in zip(header_inputs, EXPECTED_INPUTS, strict=False):
        if spec.dtype != dtype or len(spec.shape) != rank:
            raise ModelError(
                f"{path}: input {spec.name!r} is {spec.dtype} rank {len(spec.shape)}; sherpa-onnx feeds "
                f"{name} as {dtype} rank {rank} by position"
            )
    if len(header_outputs) < 1 or header_outputs[0].dtype != "float" or len(header_outputs[0].shape) != 3:
        raise ModelError(f"{path}: expected one float output of rank 3 (logits [N, T+4, vocab])")


def load_sense_voice_model(directory: Path, prefer_int8: bool = True) -> SenseVoiceModel:
    """Validate ``directory`` and describe it; raises :class:`ModelError` on any problem."""
    if not directory.is_dir():
        raise ModelError(f"{directory}: model directory does not exist")
    model_path = find_model_file(directory, prefer_int8)
    tokens_path = directory / TOKENS_FILE
    tokens = read_tokens(tokens_path)
    header = read_model_header(model_path)
    vocab_size = _check_metadata(model_path, header.metadata)
    if vocab_size != len(tokens):
        raise ModelError(
            f"{directory}: model says vocab_size={vocab_size} but {TOKENS_FILE} has {len(tokens)} tokens; "
            "the two files do not belong together"
        )
    _check_signature(model_path, header.inputs, header.outputs)
    return SenseVoiceModel(directory, model_path, tokens_path, vocab_size, header.metadata)
