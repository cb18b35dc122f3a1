"""Whisper's two graphs (our export, ``models/whisper_export.py``) on onnxruntime: sessions, the
front end sherpa-onnx feeds them, and one decoder step.

Shared by the decoding engine (``asr/ort_whisper.py``) and the restricted language step
(``asr/whisper_language.py``), so a server that decodes and detects holds one copy of the model
instead of two (267 MB for whisper-base).

The front end is sherpa-onnx's, so both engines see the same input: kaldi-native-fbank's Whisper
filterbank (no dither), at most ``MAX_FRAMES`` frames, log10 floored at the maximum less 8 and
mapped by ``(x + 4) / 4``, then ``tail_paddings`` frames of padding (capped at 3000 frames in all):
Whisper's own silence level by default, or sherpa-onnx's zeros (``asr.whisper.padding``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kaldi_native_fbank as knf
import numpy as np
import onnxruntime as ort

from kitt_stt.asr.providers import check_active, check_available, provider_chain
from kitt_stt.asr.sense_voice_model import read_model_header
from kitt_stt.asr.whisper_model import ALIGNMENT_OUTPUT, WhisperModel
from kitt_stt.config.schema import AsrConfig, Provider

SAMPLE_RATE = 16000
FRAME_SAMPLES = 160  # one 10 ms feature frame
WINDOW_FRAMES = 3000  # Whisper's 30 s window, in 10 ms frames
MAX_FRAMES = WINDOW_FRAMES - 50  # as sherpa-onnx: at most 30 s less a margin of silence
DECODER_OUTPUTS = ["logits", "out_n_layer_self_k_cache", "out_n_layer_self_v_cache"]


@dataclass(frozen=True)
class WhisperTokens:
    """The special token ids and dimensions the encoder's metadata carries."""

    sot: int
    eot: int
    transcribe: int
    translate: int
    no_timestamps: int
    no_speech: int
    languages: dict[str, int]  # code -> language token
    layers: int
    text_ctx: int
    text_state: int

    @classmethod
    def of(cls, model: WhisperModel) -> WhisperTokens:
        meta = read_model_header(model.encoder_path).metadata
        sot = int(meta["sot"])
        codes = meta.get("all_language_codes", "en").split(",")
        ids = meta.get("all_language_tokens", str(sot + 1)).split(",")
        return cls(sot=sot, eot=int(meta["eot"]), transcribe=int(meta["transcribe"]),
                   translate=int(meta["translate"]), no_timestamps=int(meta["no_timestamps"]),
                   no_speech=int(meta["no_speech"]),
                   languages={code: int(token) for code, token in zip(codes, ids, strict=True)},
                   layers=int(meta["n_text_layer"]), text_ctx=int(meta["n_text_ctx"]),
                   text_state=int(meta["n_text_state"]))


def whisper_log_mel(samples: np.ndarray) -> np.ndarray:
    """int16 PCM -> (80, frames) log-mel normalised as Whisper (and sherpa-onnx) do: log10,
    floor at the maximum less 8, then (x + 4) / 4; at most ``MAX_FRAMES`` frames, as sherpa-onnx
    keeps (the floor is taken over those)."""
    options = knf.WhisperFeatureOptions()
    options.frame_opts.dither = 0.0
    fbank = knf.OnlineWhisperFbank(options)
    fbank.accept_waveform(SAMPLE_RATE, samples.astype(np.float32) / 32768.0)  # an array: no list of floats
    fbank.input_finished()
    count = min(fbank.num_frames_ready, MAX_FRAMES)
    if count == 0:
        return np.zeros((options.dim, 0), dtype=np.float32)
    mel = np.stack([fbank.get_frame(i) for i in range(count)]).astype(np.float32)
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).T


def silence_level(mel: np.ndarray) -> float:
    """The normalised log-mel of digital silence after ``mel``: its floor, the maximum less 8 in
    log10, so less 2 once mapped; what Whisper's own padding to 30 s reads as. sherpa-onnx pads
    with 0 instead (log10 = -4, louder than that floor): on short pieces whisper-base then repeats
    itself ("Front Front Front"), docs/models.md."""
    return float(mel.max()) - 2.0 if mel.size else 0.0


def padded_mel(mel: np.ndarray, pad_frames: int, fill: float = 0.0) -> np.ndarray:
    """(1, 80, T) for the encoder: ``mel`` then ``pad_frames`` frames of ``fill``, at most 3000 in
    all, and never fewer than 2 (the encoder's strided convolution needs two)."""
    frames = max(min(mel.shape[1] + pad_frames, WINDOW_FRAMES), 2)
    padded = np.full((1, mel.shape[0], frames), fill, dtype=np.float32)
    kept = min(mel.shape[1], frames)
    padded[0, :, :kept] = mel[:, :kept]
    return padded


def _cpu_options(num_threads: int) -> ort.SessionOptions:
    """``num_threads`` per session and no spinning: idle sessions must not take the cores of other
    decodes (sherpa-onnx's, or another worker's)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = num_threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _chains(config: AsrConfig) -> tuple[list[Any], list[Any], Provider]:
    """Providers of the encoder and of the decoder, and the one the decoder is checked against.

    TensorRT takes the encoder only: the decoder's inputs change shape at every step (the prompt,
    then one token; the cross k/v with the audio), so TensorRT would build an engine per shape, and
    its int8 graph is dynamically quantised, which TensorRT does not run; it runs on CUDA."""
    chain = provider_chain(config)
    if config.provider is Provider.TENSORRT:
        trt_options = {key: value for key, value in chain[0][1].items() if not key.startswith("trt_profile_")}
        frames = f"mel:1x80x{WINDOW_FRAMES}"
        trt_options |= {"trt_profile_min_shapes": "mel:1x80x2", "trt_profile_opt_shapes": frames,
                        "trt_profile_max_shapes": frames}
        return [("TensorrtExecutionProvider", trt_options), chain[1]], [chain[1]], Provider.CUDA
    return chain, chain, config.provider


class WhisperGraphs:
    """The encoder and decoder sessions of one Whisper model, on the configured provider (the
    same placement check as SenseVoice's: a GPU request that fell back to the CPU is refused)."""

    def __init__(self, model: WhisperModel, config: AsrConfig) -> None:
        self.model = model
        self.tokens = WhisperTokens.of(model)
        if config.provider is not Provider.CPU:
            check_available(config.provider)
        options = _cpu_options(config.num_threads)
        encoder_chain, decoder_chain, decoder_provider = _chains(config)
        self.encoder = ort.InferenceSession(str(model.encoder_path), options, providers=encoder_chain)
        self.decoder = ort.InferenceSession(str(model.decoder_path), options, providers=decoder_chain)
        check_active(self.encoder, config.provider)
        check_active(self.decoder, decoder_provider)
        self.aligns = model.aligns  # an export with the alignment heads' scores can time words

    def encode(self, mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(1, 80, T) -> every decoder layer's cross keys and values, (layers, 1, T / 2, d) each."""
        cross_k, cross_v = self.encoder.run(None, {"mel": mel})
        return cross_k, cross_v

    def empty_cache(self) -> np.ndarray:
        t = self.tokens
        return np.zeros((t.layers, 1, t.text_ctx, t.text_state), dtype=np.float32)

    def step(self, tokens: list[int], cache: tuple[np.ndarray, np.ndarray], cross: tuple[np.ndarray, np.ndarray],
             offset: int, scores: bool = False) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray | None]:
        """Run ``tokens`` at positions ``offset``.. with the self-attention ``cache`` of the positions
        before; returns the logits of the last token, the updated cache and, with ``scores`` (on an
        export that has them), the alignment heads' raw cross-attention scores (heads, tokens, frames)."""
        names = [*DECODER_OUTPUTS, ALIGNMENT_OUTPUT] if scores and self.aligns else DECODER_OUTPUTS
        outputs = self.decoder.run(names, {
            "tokens": np.array([tokens], dtype=np.int64),
            "in_n_layer_self_k_cache": cache[0],
            "in_n_layer_self_v_cache": cache[1],
            "n_layer_cross_k": cross[0],
            "n_layer_cross_v": cross[1],
            "offset": np.array([offset], dtype=np.int64),
        })
        qk = outputs[3][0] if len(outputs) > 3 else None
        return np.asarray(outputs[0][0, -1], dtype=np.float32), (outputs[1], outputs[2]), qk
