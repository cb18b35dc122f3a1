"""Typed frames of protocol v1.

Client frames are validated strictly (an int is not a bool, bytes are not a string) but
unknown extra fields are ignored, because the protocol allows fields to be added.
"""

from __future__ import annotations

import unicodedata
from functools import lru_cache
from typing import Annotated, Any, ClassVar, Literal

import msgpack
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictBytes,
    StrictInt,
    StrictStr,
    field_validator,
    model_serializer,
)

from kitt_stt.text.wake import MAX_WAKE_PHRASES

PROTOCOL_VERSION = 1
MAX_PING_ID_BYTES = 1024

# Unicode general categories a name shown in logs and dashboards must not contain: controls (Cc),
# format characters such as bidi overrides and zero-width joiners (Cf), surrogates (Cs), private
# use (Co), unassigned code points (Cn), and line/paragraph separators (Zl, Zp).
_UNPRINTABLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})
# Characters that render as nothing although their category is a letter, mark or symbol: the
# combining grapheme joiner, Hangul and halfwidth fillers, Khmer inherent vowels, Mongolian and
# generic variation selectors, and the blank braille pattern.
_INVISIBLE = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0, 0x180B, 0x180C, 0x180D, 0x180F,
     *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]
)


@lru_cache(maxsize=4096)  # a seat name is checked on every audio frame (twice: the error echo, the field)
def printable(value: str) -> str:
    """Refuse characters that can hide, reorder or forge text where a name is displayed.

    Seat names and client ids end up in logs, traces and operators' dashboards; a bidi override
    (U+202E) or a zero-width character there makes two different names look alike or rewrites
    the rest of the line.  Any script and ordinary spaces stay allowed ("主驾", "rear left").
    """
    for char in value:
        category = unicodedata.category(char)
        if category in _UNPRINTABLE_CATEGORIES or ord(char) in _INVISIBLE:
            raise ValueError(f"must not contain U+{ord(char):04X} (category {category}): control, format, "
                             "separator, invisible and unassigned characters are refused")
    return value


# 1-64 printable characters of any script, spaces included ("driver", "主驾", "rear left")
Seat = Annotated[StrictStr, Field(min_length=1, max_length=64), AfterValidator(printable)]
Language = Annotated[StrictStr, Field(min_length=1, max_length=16)]
ClientId = Annotated[StrictStr, Field(max_length=128), AfterValidator(printable)]


class ClientFrame(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class WakeFields(ClientFrame):
    """``start.wake`` / ``configure.wake``: the fields given replace the session's; the rest stay.
    Only types are checked here; values are checked as a whole by ``kitt_stt.text.WakeSettings``
    (the list's length here too, so a huge list is refused before its items are read)."""

    phrases: Annotated[list[StrictStr], Field(max_length=MAX_WAKE_PHRASES)] | None = None
    mode: StrictStr | None = None
    follow_up_ms: StrictInt | None = None
    min_confidence: float | None = None


class TextFields(ClientFrame):
    """``start.text`` / ``configure.text``: types here, values in ``kitt_stt.text.TextSettings``."""

    script: StrictStr | None = None
    itn: StrictBool | None = None


Languages = Annotated[list[Language], Field(max_length=16)]  # what "auto" may detect; values checked by the session


class SessionFields(ClientFrame):
    """What ``start`` and ``configure`` both set (docs/protocol.md: ``configure`` takes these "as in
    ``start``"), declared once so the two cannot drift apart."""

    language: Language | None = None
    languages: Languages | None = None
    hotwords: list[StrictStr] | None = None
    interim: StrictBool | None = None
    eager: StrictBool | None = None
    wake: WakeFields | None = None
    text: TextFields | None = None
    words: StrictBool | None = None
    turn_ends: StrictBool | None = None
    bleed: StrictBool | None = None
    arbitration: StrictBool | None = None


class StartFrame(SessionFields):
    type: Literal["start"]
    seats: Annotated[list[Seat], Field(max_length=64)] | None = None
    client: ClientId | None = None


class AudioFrame(ClientFrame):
    type: Literal["audio"]
    seat: Seat = "default"
    seq: StrictInt | None = None
    pcm: StrictBytes
    sample_rate: StrictInt | None = None


class VadFrame(ClientFrame):
    type: Literal["vad"]
    seat: Seat = "default"
    event: Literal["start", "stop"]


class FinalizeFrame(ClientFrame):
    type: Literal["finalize"]
    seat: Seat | None = None


class ConfigureFrame(SessionFields):
    type: Literal["configure"]


class PingFrame(ClientFrame):
    """``id`` is any msgpack value; the pong carries it back unchanged (see ``PongFrame``)."""

    type: Literal["ping"]
    id: Any = None

    @field_validator("id")
    @classmethod
    def _echoable(cls, value: Any) -> Any:
        """Refuse here, as ``bad_field``, an id the pong could not carry back.

        The unpacker accepts ~1000 nesting levels; older msgpack releases (the dependency allows
        any 1.x) pack at most 511, and the pure-Python fallback runs out of Python stack first.
        Without this check such an id would fail while the server encodes the pong.
        """
        try:
            packed = msgpack.packb(value, use_bin_type=True)
        except (ValueError, TypeError, OverflowError, RecursionError) as exc:
            raise ValueError(f"cannot be echoed in a pong: {exc}") from None
        if len(packed) > MAX_PING_ID_BYTES:  # a client that does not read must not queue megabytes of pongs
            raise ValueError(f"is {len(packed)} bytes packed; at most {MAX_PING_ID_BYTES}")
        return value


class CloseFrame(ClientFrame):
    type: Literal["close"]


CLIENT_FRAME_TYPES: dict[str, type[ClientFrame]] = {
    "start": StartFrame,
    "audio": AudioFrame,
    "vad": VadFrame,
    "finalize": FinalizeFrame,
    "configure": ConfigureFrame,
    "ping": PingFrame,
    "close": CloseFrame,
}


class ServerFrame(BaseModel):
    """A frame the server sends; ``codec.encode_server_frame`` turns it into msgpack.

    ``echo_fields`` name fields that carry a client's msgpack value back untouched: the codec
    packs them as they are instead of through pydantic's JSON mode, which would turn bytes
    into text (or fail on bytes that are not UTF-8) and NaN into null.
    """

    model_config = ConfigDict(frozen=True)
    echo_fields: ClassVar[tuple[str, ...]] = ()
    # fields added later that are left out of the frame while None, so sessions that did not ask
    # for them get the frame exactly as before
    omitted_when_none: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: Any) -> Any:
        data = handler(self)
        for name in self.omitted_when_none:
            if isinstance(data, dict) and data.get(name, 0) is None:
                del data[name]
        return data


class ModelInfo(BaseModel):
    name: str
    kind: str
    provider: str
    hotwords: bool  # whether the engine applies hotwords (otherwise they are accepted and ignored)
    words: bool = False  # whether the engine times words (``words: true`` sessions get final.words)


class Limits(BaseModel):
    sample_rate: int
    frame_ms: int
    max_frame_ms: int
    max_seats: int
    max_segment_ms: int
    realtime_factor: float
    burst_ms: int


class ReadyFrame(ServerFrame):
    type: Literal["ready"] = "ready"
    session_id: str
    protocol: int = PROTOCOL_VERSION
    model: ModelInfo
    limits: Limits


class SpeechStartFrame(ServerFrame):
    type: Literal["speech_start"] = "speech_start"
    seat: str
    segment_id: int
    audio_ms: int


class InterimFrame(ServerFrame):
    type: Literal["interim"] = "interim"
    seat: str
    segment_id: int
    text: str
    audio_ms: int


class WordFrame(BaseModel):
    """One word of a final, on the seat's audio clock (``docs/protocol.md``, "Words")."""

    text: str
    start_ms: int
    end_ms: int
    confidence: float


class FinalFrame(ServerFrame):
    type: Literal["final"] = "final"
    seat: str
    segment_id: int
    text: str
    start_ms: int
    end_ms: int
    lang: str | None
    lang_probability: float | None = None  # of `lang` among the languages "auto" may detect; None: not detected
    emotion: str | None = None
    event: str | None = None
    server_latency_ms: float
    timing: dict[str, float]
    end_reason: str
    wake: dict[str, str] | None = None  # {phrase, text}: the wake phrase this final began with
    confidence: float | None = None  # ``words: true`` sessions: the segment's (geometric mean of its words')
    words: list[WordFrame] | None = None  # ``words: true`` sessions: {text, start_ms, end_ms, confidence}

    omitted_when_none: ClassVar[tuple[str, ...]] = ("confidence", "words")


class WakeFrame(ServerFrame):
    """A wake phrase was heard at the start of a turn (once per turn, as soon as it shows)."""

    type: Literal["wake"] = "wake"
    seat: str
    segment_id: int
    phrase: str
    text: str
    audio_ms: int


class FilteredFrame(ServerFrame):
    """A turn that ends without a commit: not addressed to the assistant (``wake.mode: required``,
    reason ``no_wake``), or, for sessions that ask (``turn_ends``), one with nothing to commit
    (``empty``: noise; ``wake_only``: only the wake phrase), so every started turn ends on the wire."""

    type: Literal["filtered"] = "filtered"
    seat: str
    turn_id: int
    segment_ids: list[int]
    text: str
    reason: Literal["no_wake", "empty", "wake_only"] = "no_wake"


class EotDecision(BaseModel):
    reason: Literal["model", "timeout", "stop", "finalize", "max_duration"]
    probability: float | None
    threshold: float | None
    wait_ms: float
    model_ms: float | None


class CommitFrame(ServerFrame):
    type: Literal["commit"] = "commit"
    seat: str
    turn_id: int
    text: str
    segment_ids: list[int]
    metadata: dict[str, Any]
    confidence: float | None = None  # ``words: true`` sessions: the lowest of the turn's finals'

    omitted_when_none: ClassVar[tuple[str, ...]] = ("confidence",)


class TurnEagerFrame(ServerFrame):
    """The turn is probably over (``turn.eager_threshold`` <= p < ``turn.threshold``): an agent may
    start preparing its answer to ``text``; a ``turn_resumed`` or the ``commit`` follows."""

    type: Literal["turn_eager"] = "turn_eager"
    seat: str
    turn_id: int
    text: str
    probability: float


class TurnResumedFrame(ServerFrame):
    """Speech resumed after a ``turn_eager``: the turn goes on; drop the draft answer."""

    type: Literal["turn_resumed"] = "turn_resumed"
    seat: str
    turn_id: int


class BleedFrame(ServerFrame):
    """A segment of ``seat`` was dropped before decoding: it was ``source``'s voice, heard weaker
    and later (seat arbitration, ``vad.arbitration``). Sent only to sessions that ask (``bleed``)."""

    type: Literal["bleed"] = "bleed"
    seat: str
    source: str
    start_ms: int  # the dropped speech's start on the seat's clock
    audio_ms: int  # when it was decided
    correlation: float
    level_db: float  # the seat's level relative to ``source``'s (negative: weaker)
    delay_ms: float  # how much later the seat heard it


class ErrorFrame(ServerFrame):
    type: Literal["error"] = "error"
    code: str
    message: str
    fatal: bool = False
    seat: str | None = None


class PongFrame(ServerFrame):
    type: Literal["pong"] = "pong"
    id: Any = None

    echo_fields: ClassVar[tuple[str, ...]] = ("id",)
