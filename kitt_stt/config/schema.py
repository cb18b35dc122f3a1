"""Typed configuration with named defaults; unknown keys are rejected (``extra="forbid"``).

Every default is chosen in ``docs/configuration.md``; keep the two in step.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kitt_stt.hotwords import MAX_HOTWORDS, parse_hotword
from kitt_stt.str_enum import StrEnum
from kitt_stt.text import TextSettings, WakeSettings


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class Provider(StrEnum):
    """Where inference runs."""

    CPU = "cpu"
    CUDA = "cuda"
    TENSORRT = "tensorrt"


class RateLimitConfig(_Section):
    """Per-seat audio budget: ``burst_ms`` of audio at once, then ``realtime_factor`` x real time."""

    realtime_factor: float = Field(default=4.0, gt=0)
    burst_ms: int = Field(default=10_000, ge=1000)


class SegmentStartBudget(_Section):
    """Per-seat budget for opening segments (each one costs a final decode): ``burst`` at once,
    then ``per_s`` a second. Real speech opens at most ~2 a second (start + silence hysteresis)."""

    per_s: float = Field(default=2.0, gt=0)
    burst: int = Field(default=10, ge=1)


class HotwordChangeBudget(_Section):
    """Per-connection budget for changing hotwords (``start``/``configure``): ``burst`` at once, then
    ``per_s`` a second. Each new list costs a trie build (up to ~0.1 s of CPU for 1000 long words);
    a car changes its list when the context does (contacts, a destination), not several times a second."""

    per_s: float = Field(default=0.5, gt=0)
    burst: int = Field(default=5, ge=1)


def _quoted_token(value: object) -> object:
    """A token must be text as written: YAML reads unquoted 0123 as 83, 0x1F as 31 and 12:30 as 750."""
    if value is not None and not isinstance(value, str):
        raise ValueError(f"write the token as a quoted string (YAML read it as {type(value).__name__} {value!r}), "
                         'e.g. token: "0123"')
    return value


class ServerConfig(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    path: str = "/stt/sensevoice"
    auth_token: str | None = None
    metrics_auth: bool = False
    max_connections: int = Field(default=64, ge=1)
    max_connections_per_client_ip: int | None = Field(default=None, ge=1)
    idle_timeout_s: float = Field(default=60.0, ge=0)
    max_pending_decodes: int = Field(default=32, ge=1, le=10_000)
    max_messages_per_s: int = Field(default=2000, ge=10)
    # and at most this many bytes a second (one second's worth at once): 8 seats at the audio rate
    # limit send 1 MiB/s; a flood of 130 KB hotword lists otherwise kept the event loop busy
    max_read_bytes_per_s: int = Field(default=4 << 20, ge=64 << 10)
    segment_starts: SegmentStartBudget = SegmentStartBudget()
    hotword_changes: HotwordChangeBudget = HotwordChangeBudget()
    max_seats: int = Field(default=8, ge=1, le=64)
    max_frame_ms: int = Field(default=1000, ge=10, le=1000)
    max_message_bytes: int = Field(default=1 << 20, ge=4096)
    outbound_queue_frames: int = Field(default=2000, ge=10)
    # A client that does not read is closed (slow_consumer) before its answers use this much memory,
    # or when its socket has taken nothing for send_stall_s (docs/protocol.md).
    max_outbox_bytes: int = Field(default=4 << 20, ge=64 << 10)
    send_stall_s: float = Field(default=10.0, gt=0, le=300)
    rate_limit: RateLimitConfig = RateLimitConfig()
    shutdown_grace_s: float = Field(default=10.0, ge=0)
    # The browser console (docs/console.md): a debugging page served at /console. Off in the
    # Kubernetes overlays, where nobody should talk to a production pod from a browser.
    console: bool = True
    # /openapi.json, /docs, /redoc: behind auth_token when one is set; off in the Kubernetes overlays.
    api_docs: bool = True

    _auth_token_is_text = field_validator("auth_token", mode="before")(_quoted_token)

    @field_validator("auth_token")
    @classmethod
    def _token_not_blank(cls, value: str | None) -> str | None:
        if value is not None and not value.strip():
            raise ValueError("an empty auth token would turn authentication off: remove the key (or set null) "
                             "to run without auth, or set a real token")
        return value

    @model_validator(mode="after")
    def _metrics_auth_needs_token(self) -> ServerConfig:
        if self.metrics_auth and not self.auth_token:
            raise ValueError("server.metrics_auth needs server.auth_token")
        return self


class CudaOptions(_Section):
    """onnxruntime CUDA execution provider options (``asr.cuda``)."""

    device_id: int = Field(default=0, ge=0)
    gpu_mem_limit_mb: int | None = Field(default=None, ge=256)
    arena_extend_strategy: str = "kSameAsRequested"
    cudnn_conv_algo_search: str = "HEURISTIC"


class TensorRTOptions(_Section):
    """onnxruntime TensorRT execution provider options (``asr.tensorrt``).

    The optimisation profile covers ``x`` [batch, T, 560] with T in LFR frames (60 ms each):
    1 / 100 / 2000 frames is 60 ms / 6 s / 120 s of audio; batch up to ``asr.max_batch``.

    Caches live under one absolute ``cache_dir`` (a persistent volume in the images), because a
    relative path lands wherever the process happens to start and an engine there is lost with
    the container. ``engine_cache_path`` / ``timing_cache_path`` stay for existing deployments: unset,
    they are ``<cache_dir>/engines`` and ``<cache_dir>/timing``; relative, they are taken under
    ``cache_dir``. The engine itself goes one level deeper, into a directory keyed by GPU, TensorRT,
    onnxruntime, the model's sha256 and the build options (``kitt_stt/ops/trt_key.py``), because
    onnxruntime's own cache check covers none of the weights.
    """

    fp16: bool = True
    cache_dir: Path = Path("/var/cache/kitt-stt/trt")
    engine_cache_path: Path | None = None
    timing_cache_path: Path | None = None
    max_workspace_mb: int = Field(default=4096, ge=64)
    builder_optimization_level: int = Field(default=3, ge=0, le=5)
    profile_min_frames: int = Field(default=1, ge=1)
    profile_opt_frames: int = Field(default=100, ge=1)
    profile_max_frames: int = Field(default=2000, ge=1)
    ep_context_model: Path | None = None

    @field_validator("cache_dir")
    @classmethod
    def _absolute_cache_dir(cls, value: Path) -> Path:
        """A relative cache_dir is pinned to the working directory at load time, once."""
        return value.expanduser().absolute()

    def engine_root(self) -> Path:
        """Where keyed engine directories go: absolute, whatever the process's working directory."""
        return self._under_cache_dir(self.engine_cache_path, "engines")

    def timing_root(self) -> Path:
        """Where keyed timing-cache directories go (timing caches are shared by models)."""
        return self._under_cache_dir(self.timing_cache_path, "timing")

    def _under_cache_dir(self, path: Path | None, default: str) -> Path:
        if path is None:
            return self.cache_dir / default
        path = path.expanduser()
        return path if path.is_absolute() else self.cache_dir / path

    @model_validator(mode="after")
    def _ordered_profile(self) -> TensorRTOptions:
        if not self.profile_min_frames <= self.profile_opt_frames <= self.profile_max_frames:
            raise ValueError("profile frames must satisfy min <= opt <= max")
        return self


class Engine(StrEnum):
    SHERPA = "sherpa"
    ONNXRUNTIME = "onnxruntime"


class Decoding(_Section):
    method: str = Field(default="greedy", pattern="^(greedy|beam)$")
    max_active_paths: int = Field(default=4, ge=1, le=64)


class WhisperOptions(_Section):
    """Whisper models (``asr.whisper``); they always run on sherpa-onnx, whatever ``asr.engine`` says."""

    tail_paddings: int = Field(default=700, ge=50, le=2000)  # 10 ms frames of silence after the audio
    task: str = Field(default="transcribe", pattern="^(transcribe|translate)$")
    # the restricted language step (asr/whisper_language.py): how much speech it reads, the silence
    # after it, and log-prior offsets per language; chosen by utils/performance/lid_report.py
    language_window_ms: int = Field(default=1500, ge=500, le=29_500)
    language_pad_frames: int = Field(default=700, ge=0, le=2000)
    language_bias: dict[str, float] = {"zh": 3.0}


class AsrConfig(_Section):
    model: str = "whisper-base"
    engine: Engine = Engine.ONNXRUNTIME
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
    hotwords: list[str] = []
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


class VadConfig(_Section):
    engine: VadEngine = VadEngine.WEBRTC
    model: str = "silero-vad"  # the neural engine's model: a registry name or a directory
    aggressiveness: int = Field(default=2, ge=0, le=3)  # webrtc
    threshold: float = Field(default=0.5, ge=0.05, le=0.95)  # silero: speech starts at this probability
    release: float = Field(default=0.15, ge=0.0, le=0.5)  # silero: ... and stops below threshold - release
    highpass_hz: int = Field(default=150, ge=0, le=400)  # 0: off; road and engine noise live below it
    # speech must stand this far above the noise floor; 0: off; null: the engine's own (webrtc 6, silero 0)
    noise_gate_db: float | None = Field(default=None, ge=0.0, le=30.0)
    noise_window_ms: int = Field(default=1500, ge=200, le=10_000)  # the noise floor: the quietest moment of this window

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


class InterimConfig(_Section):
    enabled: bool = True
    start_ms: int = Field(default=1000, ge=0)
    min_interval_ms: int = Field(default=1000, ge=50)


class TurnConfig(_Section):
    """End of turn: the TurnSense model's probability combined with silence time (docs/turns.md)."""

    model: str | None = "turnsense"
    provider: Provider = Provider.CPU
    num_threads: int = Field(default=1, ge=1)
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


class ModelsConfig(_Section):
    cache_dir: Path | None = None
    sensevoice_url: str = (
        "https://github.com/k2-fsa/sherpa-onnx/releases/download/asr-models/"
        "sherpa-onnx-sense-voice-zh-en-ja-ko-yue-2024-07-17.tar.bz2"
    )
    sensevoice_sha256: str | None = None


class LoggingConfig(_Section):
    level: str = "INFO"
    json_format: bool = False


class TracingConfig(_Section):
    """Chrome-trace timeline (open in ui.perfetto.dev); off by default."""

    enabled: bool = False
    path: Path = Path("traces/kitt-stt.trace.json.gz")
    max_events: int = Field(default=100_000, ge=100)
    max_bytes: int = Field(default=32 << 20, ge=1 << 16)
    flush_interval_s: float = Field(default=30.0, gt=0)
    keep_files: int = Field(default=3, ge=1, le=100)


class DebugConfig(_Section):
    """``/debug/logs`` and ``/debug/trace``: off unless enabled, and always behind a token."""

    logs_enabled: bool = False
    trace_enabled: bool = False
    token: str | None = None
    logs_max_bytes: int = Field(default=1 << 20, ge=1024)
    logs_max_records: int = Field(default=2000, ge=10)

    _token_is_text = field_validator("token", mode="before")(_quoted_token)

    @model_validator(mode="after")
    def _token_required(self) -> DebugConfig:
        if (self.logs_enabled or self.trace_enabled) and not self.token:
            raise ValueError("debug endpoints expose what people said: set debug.token to enable them")
        return self


class FileTranscriptionConfig(_Section):
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


class AppConfig(_Section):
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
