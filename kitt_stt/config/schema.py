"""Typed configuration with named defaults; unknown keys are rejected (``extra="forbid"``).

Every default is chosen in ``docs/configuration.md``; keep the two in step.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from pydantic import Field, field_validator, model_validator

from kitt_stt.config.execution import CudaOptions, TensorRTOptions
from kitt_stt.config.section import Section
from kitt_stt.config.server_config import HotwordChangeBudget, ServerConfig, quoted_token
from kitt_stt.hotwords import MAX_HOTWORDS, parse_hotword
from kitt_stt.str_enum import StrEnum
from kitt_stt.text import TextSettings, WakeSettings


class Provider(StrEnum):
    """Where inference runs."""

    CPU = "cpu"
    CUDA = "cuda"
    TENSORRT = "tensorrt"


class Engine(StrEnum):
    """Who decodes. ``ort`` (the default since 0.6.1): our onnxruntime pipelines for every model
    (SenseVoice and Whisper: one encoder pass for language and text, words, one model copy);
    ``onnxruntime``: ours for SenseVoice and sherpa-onnx for Whisper (what it meant before 0.6.1, kept
    so configurations that name it decode as before); ``sherpa``: sherpa-onnx, the reference (CPU,
    greedy). Our Whisper pads as Whisper was trained, not as sherpa-onnx does (docs/models.md)."""

    SHERPA = "sherpa"
    ONNXRUNTIME = "onnxruntime"
    ORT = "ort"


class Decoding(Section):
    method: str = Field(default="greedy", pattern="^(greedy|beam)$")
    max_active_paths: int = Field(default=4, ge=1, le=64)


class WhisperPadding(StrEnum):
    """What fills the frames after the audio on our engine (``asr.engine: ort``): ``whisper``, the
    log-mel of digital silence (what Whisper saw after speech in training); ``zeros``, sherpa-onnx's
    fill (a louder value than silence), to reproduce the reference engine's text."""

    WHISPER = "whisper"
    ZEROS = "zeros"


class WhisperOptions(Section):
    """Whisper models (``asr.whisper``), on either engine (``asr/ort_whisper.py``, ``asr/sherpa_whisper.py``)."""

    tail_paddings: int = Field(default=700, ge=50, le=2000)  # 10 ms frames of silence after the audio
    padding: WhisperPadding = WhisperPadding.WHISPER  # ours only: sherpa-onnx always pads with zeros
    task: str = Field(default="transcribe", pattern="^(transcribe|translate)$")
    # the restricted language step (asr/whisper_language.py): how much speech it reads, the silence
    # after it, and log-prior offsets per language; chosen by utils/performance/lid_report.py
    language_window_ms: int = Field(default=1500, ge=500, le=29_500)
    language_pad_frames: int = Field(default=300, ge=0, le=2000)
    language_bias: dict[str, float] = Field(default_factory=lambda: {"zh": 2.15})


class AsrConfig(Section):
    model: str = "whisper-base"
    engine: Engine = Engine.ORT
    provider: Provider = Provider.CPU
    cuda: CudaOptions = CudaOptions()
    tensorrt: TensorRTOptions = TensorRTOptions()
    decoding: Decoding = Decoding()
    whisper: WhisperOptions = WhisperOptions()
    num_threads: int = Field(default=1, ge=1)
    workers: int = Field(default=2, ge=1, le=64)
    max_batch: int = Field(default=1, ge=1, le=64)
    language: str = "auto"
    # Languages sessions may pick (each Whisper language is a separate ~300 MB recognizer); entries
    # the model does not know are left out at start-up.
    languages: list[str] = Field(default=["auto", "zh", "en", "yue", "ja", "ko"], min_length=1)
    # The languages "auto" may detect (an in-car product speaks a known set): detection picks the
    # best of these, never another; sessions may narrow it (`languages` in start/configure). Entries
    # outside asr.languages (or the model) are left out; with none left, auto chooses among asr.languages.
    auto_languages: list[str] = Field(default=["zh", "en"], min_length=1, max_length=16)
    # a turn keeps its first segment's language unless a later one's probability is this much higher
    language_switch_margin: float = Field(default=0.25, ge=0.0, le=1.0)
    max_recognizers: int = Field(default=2, ge=1, le=100)
    hotword_cache_size: int = Field(default=64, ge=1, le=10_000)
    max_queue: int = Field(default=256, ge=1)
    use_itn: bool = True
    words: bool = False  # sessions' default for `words`: final.words and confidence (docs/protocol.md)
    hotwords: list[str] = Field(default_factory=list)
    chunk_pause_ms: int = Field(default=100, ge=0)
    max_chunk_ms: int = Field(default=5000, ge=1000)
    interim_queue_budget_ms: int = Field(default=300, ge=0)
    naive: bool = False

    @field_validator("auto_languages")
    @classmethod
    def _languages_not_auto(cls, value: list[str]) -> list[str]:
        if "auto" in value:
            raise ValueError("list the languages auto may choose from, not 'auto' itself")
        return value

    @field_validator("chunk_pause_ms")
    @classmethod
    def _whole_frames(cls, value: int) -> int:
        if 0 < value < 20:
            raise ValueError("must be 0 (chunking off) or at least 20 (one VAD frame)")
        return value

    @field_validator("hotwords")
    @classmethod
    def _check_hotwords(cls, value: list[str]) -> list[str]:
        for entry in value:
            parse_hotword(entry)
        return value


class VadEngine(StrEnum):
    """Who decides whether a 20 ms frame is speech (docs/configuration.md, "Speech detection")."""

    WEBRTC = "webrtc"
    """webrtcvad's GMM: no model to fetch, microseconds a frame; hears the tone test language."""
    SILERO = "silero"
    """Silero VAD v6 on onnxruntime (the ``silero-vad`` registry model): hears voices, not noise."""


class VadConfig(Section):
    engine: VadEngine = VadEngine.WEBRTC
    model: str = "silero-vad"  # the neural engine's model: a registry name or a directory
    aggressiveness: int = Field(default=2, ge=0, le=3)  # webrtc
    threshold: float = Field(default=0.5, ge=0.05, le=0.95)  # silero: speech starts at this probability
    release: float = Field(default=0.15, ge=0.0, le=0.5)  # silero: ... and stops below threshold - release
    highpass_hz: int = Field(default=150, ge=0, le=400)  # 0: off; road and engine noise live below it
    # speech must stand this far above the noise floor; 0: off; null: the engine's own (webrtc 6, silero 0)
    noise_gate_db: float | None = Field(default=None, ge=0.0, le=30.0)
    noise_window_ms: int = Field(default=1500, ge=200, le=10_000)  # the noise floor: the quietest moment of this window
    # silero: the due windows of all seats are scored together, up to this many per onnxruntime run, on the
    # detector's own thread (off the event loop); 0: each seat's windows on the loop, one run each
    batch: int = Field(default=64, ge=0, le=1024)
    # silero, batched: how long a due window may wait for other seats' before the run (under one 32 ms window)
    batch_wait_ms: float = Field(default=10.0, ge=0.0, lt=32.0)
    provider: Provider = Provider.CPU  # silero: cpu | cuda (refused at start-up when the session runs elsewhere)

    @field_validator("provider")
    @classmethod
    def _check_provider(cls, value: Provider) -> Provider:
        if value is Provider.TENSORRT:
            raise ValueError("vad.provider: tensorrt is not supported (a 2 MB model); use cpu or cuda")
        return value

    @model_validator(mode="after")
    def _speech_can_stop(self) -> VadConfig:
        """Silero's speech stops below ``threshold - release``: at 0 or below no probability is
        ever low enough, and no segment would end."""
        if round(self.threshold - self.release, 6) < 0.05:
            raise ValueError(f"vad.release ({self.release}) must be at least 0.05 below vad.threshold "
                             f"({self.threshold}), or speech never stops")
        return self
    start_ms: int = Field(default=60, ge=20)
    start_window_ms: int = Field(default=100, ge=20)
    silence_ms: int = Field(default=200, ge=60)
    preroll_ms: int = Field(default=300, ge=0, le=2000)
    max_segment_ms: int = Field(default=30_000, ge=1000)
    # seat arbitration (kitt_stt/pipeline/arbitration.py): on connections with more than one seat, a
    # segment that is another seat's voice, weaker and 0-10 ms later, is dropped before decoding
    arbitration: bool = True
    arbitration_window_ms: int = Field(default=240, ge=0, le=2000)  # speech a new segment is held for
    arbitration_correlation: float = Field(default=0.6, gt=0.0, le=1.0)  # this alike counts as the same voice
    bleed_events: bool = False  # every session gets `bleed` frames (a session asks with `bleed: true`)


class InterimConfig(Section):
    enabled: bool = True
    start_ms: int = Field(default=1000, ge=0)
    min_interval_ms: int = Field(default=1000, ge=50)


class TurnPolicy(StrEnum):
    """How the end of a turn is decided (docs/turns.md)."""

    FUSED = "fused"  # the combiner over what its weights name (shipped: the words' text view); the default since 0.6
    TURNSENSE = "turnsense"  # the model's p against turn.threshold alone (0.3.0)


class TurnConfig(Section):
    """End of turn: when the user is done (docs/turns.md): the fused decision over the turn's words and,
    as its weights choose, TurnSense's p, the silence and the prosody; or TurnSense's p alone."""

    model: str | None = "turnsense"
    provider: Provider = Provider.CPU
    num_threads: int = Field(default=1, ge=1)  # intra-op threads of TurnSense and of the text view's model
    threshold: float = Field(default=0.9, ge=0.0, le=1.0)
    wait_ms: int = Field(default=1500, ge=0)
    # "probably over": turn_eager for sessions that ask for it (start/configure `eager`)
    eager_threshold: float = Field(default=0.5, ge=0.0, le=1.0)
    eager_events: bool = False
    # words that end mid-phrase ("turn on the", "把空调") hold the turn (docs/turns.md)
    hold_unfinished: bool = True
    unfinished_threshold: float = Field(default=1.01, ge=0.0, le=1.01)  # above 1: the model cannot commit
    unfinished_wait_ms: int = Field(default=3000, ge=0)
    max_duration_ms: int = Field(default=60_000, ge=1000)
    context_ms: int = Field(default=500, ge=0, le=2000)
    commit_empty: bool = False
    # "fused" (docs/turns.md): graded waiting on the combiner's confidence; the shipped weights weigh the text
    # view of the turn's words (text_model) only, others may add the model's p, the silence and the prosody;
    # "turnsense": the model's p alone against `threshold`
    policy: TurnPolicy = TurnPolicy.FUSED
    fused_threshold: float = Field(default=0.7, ge=0.0, le=1.01)  # commit at a look at this fused confidence
    # second looks, ms of silence: only for weights that weigh the model's p or the silence (not the shipped ones)
    fused_looks_ms: list[int] = Field(default_factory=lambda: [300, 600], max_length=4)
    fused_weights: Path | None = None  # the combiner's weights (utils/turns/train.py --out); None: the shipped file
    # the fused decision's text view (turn/text_model.py): a registry name or a directory; null: no text view
    text_model: str | None = "smollm2-turn"

    @field_validator("fused_looks_ms")
    @classmethod
    def _looks_ascending(cls, looks: list[int]) -> list[int]:
        if any(not 100 <= look <= 5000 for look in looks) or looks != sorted(set(looks)):
            raise ValueError("fused_looks_ms: ascending, distinct, each 100-5000 ms")
        return looks


class ModelsConfig(Section):
    cache_dir: Path | None = None
    sensevoice_url: str = (
        "https://github.com/k2-fsa/sherpa-onnx/releases/download/asr-models/"
        "sherpa-onnx-sense-voice-zh-en-ja-ko-yue-2024-07-17.tar.bz2"
    )
    sensevoice_sha256: str | None = None


class LoggingConfig(Section):
    level: str = "INFO"
    json_format: bool = False


def default_trace_path() -> Path:
    """``tracing.path``'s default: absolute, in the temporary directory (writable in every image)."""
    return Path(tempfile.gettempdir()) / "kitt-stt" / "kitt-stt.trace.json.gz"


class TracingConfig(Section):
    """Chrome-trace timeline (open in ui.perfetto.dev); off by default."""

    enabled: bool = False
    # Under the temporary directory ($TMPDIR, else /tmp), not relative to the working directory:
    # the images' /app is read-only, /tmp is the pods' writable emptyDir.
    path: Path = Field(default_factory=lambda: default_trace_path())
    max_events: int = Field(default=100_000, ge=100)
    max_bytes: int = Field(default=32 << 20, ge=1 << 16)
    flush_interval_s: float = Field(default=30.0, gt=0)
    keep_files: int = Field(default=3, ge=1, le=100)


class DebugConfig(Section):
    """``/debug/logs`` and ``/debug/trace``: off unless enabled, and always behind a token."""

    logs_enabled: bool = False
    trace_enabled: bool = False
    token: str | None = None
    logs_max_bytes: int = Field(default=1 << 20, ge=1024)
    logs_max_records: int = Field(default=2000, ge=10)

    _token_is_text = field_validator("token", mode="before")(quoted_token)

    @model_validator(mode="after")
    def _token_required(self) -> DebugConfig:
        if (self.logs_enabled or self.trace_enabled) and not self.token:
            raise ValueError("debug endpoints expose what people said: set debug.token to enable them")
        return self


class FileTranscriptionConfig(Section):
    """The OpenAI-compatible upload endpoint (``POST /v1/audio/transcriptions``, docs/integrations.md).

    Uploads are decoded below live audio's priority, yet each one still holds memory and a share
    of the decode workers, so these bound what a request may cost: 25 MiB is OpenAI's own upload
    cap (clients written for it never send more); ``max_concurrent`` uploads are transcribed at
    once and further ones are answered 429 rather than queued without bound; a body that has not
    arrived within ``read_timeout_s`` is answered 408, so a client trickling it cannot hold a slot
    for ever. A prompt's hotwords cost a trie build in the cache the live sessions use: at most
    ``max_prompt_hotwords`` per upload, and new lists within one server-wide budget.
    """

    enabled: bool = True
    max_upload_bytes: int = Field(default=25 * 1024 * 1024, ge=1024)
    max_audio_s: float = Field(default=600.0, gt=0)
    max_concurrent: int = Field(default=2, ge=1)
    read_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    max_prompt_hotwords: int = Field(default=32, ge=0, le=MAX_HOTWORDS)
    hotword_changes: HotwordChangeBudget = HotwordChangeBudget(per_s=0.1, burst=5)


class AppConfig(Section):
    """The whole service configuration (see ``config.yaml`` for a commented example)."""

    server: ServerConfig = ServerConfig()
    asr: AsrConfig = AsrConfig()
    vad: VadConfig = VadConfig()
    interim: InterimConfig = InterimConfig()
    turn: TurnConfig = TurnConfig()
    wake: WakeSettings = WakeSettings()  # sessions' default wake phrases and mode (docs/text.md)
    text: TextSettings = TextSettings()  # sessions' default script and ITN (docs/text.md)
    models: ModelsConfig = ModelsConfig()
    logging: LoggingConfig = LoggingConfig()
    tracing: TracingConfig = TracingConfig()
    debug: DebugConfig = DebugConfig()
    transcriptions: FileTranscriptionConfig = FileTranscriptionConfig()  # POST /v1/audio/transcriptions

    @model_validator(mode="after")
    def _default_language_allowed(self) -> AppConfig:
        if self.asr.language not in self.asr.languages:
            raise ValueError(f"asr.language {self.asr.language!r} must be one of asr.languages "
                             f"({', '.join(self.asr.languages)})")
        return self

    @model_validator(mode="after")
    def _chunk_pause_below_segment_silence(self) -> AppConfig:
        if self.asr.chunk_pause_ms and self.asr.chunk_pause_ms >= self.vad.silence_ms:
            raise ValueError(
                f"asr.chunk_pause_ms ({self.asr.chunk_pause_ms}) must be shorter than vad.silence_ms "
                f"({self.vad.silence_ms}): a pause that long ends the segment instead (0 disables chunking)"
            )
        return self
