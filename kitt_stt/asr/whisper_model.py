"""Check a Whisper model directory (sherpa-onnx format) before sherpa-onnx loads it.

sherpa-onnx terminates the process when one of the encoder's metadata keys is missing, so the
keys, the graphs' inputs and the tokens file are checked here first (reading only the ONNX
header, not the weights) and a broken directory becomes a :class:`ModelError` naming the file.
A directory holds ``<name>-encoder[.int8].onnx``, ``<name>-decoder[.int8].onnx`` and
``<name>-tokens.txt``, as sherpa-onnx's own Whisper releases and ``kitt-stt models pull
whisper-base`` lay them out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kitt_stt.asr.sense_voice_model import ModelError, read_model_header

REQUIRED_KEYS = ("n_mels", "n_text_layer", "n_text_ctx", "n_text_state", "n_vocab", "sot", "eot", "blank_id",
                 "translate", "transcribe", "is_multilingual", "no_timestamps", "no_speech", "sot_sequence")
MULTILINGUAL_KEYS = ("all_language_tokens", "all_language_codes")
DECODER_INPUTS = 6
ALIGNMENT_OUTPUT = "cross_qk"  # the decoder's alignment heads' scores (models/whisper_export.py)
LONGEST_AUDIO_MS = 29_500  # sherpa-onnx keeps 3000 - 50 feature frames and drops the rest


@dataclass(frozen=True)
class WhisperModel:
    directory: Path
    encoder_path: Path
    decoder_path: Path
    tokens_path: Path
    languages: tuple[str, ...]
    aligns: bool = False  # the decoder outputs the alignment heads' scores (words can be timed)

    @property
    def name(self) -> str:
        return self.directory.name


def looks_like_whisper(directory: Path) -> bool:
    return any(directory.glob("*-encoder*.onnx")) and any(directory.glob("*-decoder*.onnx"))


def _pick(directory: Path, part: str, prefer_int8: bool) -> Path:
    candidates = sorted(directory.glob(f"*-{part}.int8.onnx")), sorted(directory.glob(f"*-{part}.onnx"))
    ordered = [*candidates[0], *candidates[1]] if prefer_int8 else [*candidates[1], *candidates[0]]
    if not ordered:
        raise ModelError(f"{directory}: no *-{part}.onnx or *-{part}.int8.onnx; a Whisper model directory holds "
                         "an encoder, a decoder and a tokens file (see docs/models.md)")
    return ordered[0]


def load_whisper_model(directory: Path, prefer_int8: bool = True) -> WhisperModel:
    """Validate ``directory`` and describe it; raises :class:`ModelError` on any problem."""
    if not directory.is_dir():
        raise ModelError(f"{directory}: model directory does not exist")
    encoder_path = _pick(directory, "encoder", prefer_int8)
    decoder_path = _pick(directory, "decoder", prefer_int8)
    tokens = sorted(directory.glob("*-tokens.txt"))
    if not tokens:
        raise ModelError(f"{directory}: no *-tokens.txt beside the Whisper encoder and decoder")
    encoder = read_model_header(encoder_path)
    metadata = encoder.metadata
    missing = [key for key in REQUIRED_KEYS if key not in metadata]
    multilingual = metadata.get("is_multilingual", "0") == "1"
    if multilingual:
        missing += [key for key in MULTILINGUAL_KEYS if key not in metadata]
    if missing:
        raise ModelError(f"{encoder_path}: not a sherpa-onnx Whisper encoder: metadata key(s) {', '.join(missing)} "
                         "missing (sherpa-onnx would terminate the process on this model)")
    if len(encoder.inputs) != 1 or len(encoder.outputs) != 2:
        raise ModelError(f"{encoder_path}: expected 1 input (mel) and 2 outputs (cross k/v), found "
                         f"{len(encoder.inputs)} and {len(encoder.outputs)}")
    decoder = read_model_header(decoder_path)
    if len(decoder.inputs) != DECODER_INPUTS or len(decoder.outputs) < 3:
        raise ModelError(f"{decoder_path}: expected {DECODER_INPUTS} inputs (tokens, self k/v caches, cross k/v, "
                         f"offset) and 3 outputs, found {len(decoder.inputs)} and {len(decoder.outputs)}")
    codes = tuple(metadata["all_language_codes"].split(",")) if multilingual else ("en",)
    aligns = any(output.name == ALIGNMENT_OUTPUT for output in decoder.outputs)
    return WhisperModel(directory, encoder_path, decoder_path, tokens[0], languages=("auto", *codes), aligns=aligns)
