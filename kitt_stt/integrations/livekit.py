"""A LiveKit Agents STT backed by a kitt-stt server: ``STT`` and its ``RecognizeStream`` (extra ``kitt-stt[livekit]``).

Streaming with interim results; the server's turn events become LiveKit's speech events
(``START_OF_SPEECH``, ``INTERIM_TRANSCRIPT``, ``PREFLIGHT_TRANSCRIPT`` for ``turn_eager``,
``FINAL_TRANSCRIPT`` + ``END_OF_SPEECH`` at the ``commit``), so an ``AgentSession`` with
``turn_detection="stt"`` ends the user's turn when the server's end-of-turn model does; a turn
with nothing to commit (a cough) ends with ``END_OF_SPEECH`` alone. The STT declares
``manual_flush``: LiveKit's flush (``commit_user_turn()``, push-to-talk) sends ``finalize``, so
the server commits at once instead of after its own end-of-turn wait. Pushed
audio of any rate and channel count is averaged to mono, then resampled to 16 kHz here (the
framework's own resampler is built for one channel, so the down-mix must come first). Reconnect (with
backoff, replaying the audio since the last commit) and keepalive follow
kitt_stt/integrations/link.py. Word timings: the stream asks for ``words`` (``words=True``, the
default) and declares ``aligned_transcript="word"``; each ``FINAL_TRANSCRIPT`` then carries the
turn's words as ``TimedString``s in stream time, where the server's engine times words
(``ready.model.words``; on one that does not, the capability is turned off at the first
connection and finals carry no words). ``RECOGNITION_USAGE`` reports the audio sent at every
turn end and when the stream ends, for LiveKit's usage metrics. ``recognize()``'s buffer, and a
reconnect's replay and the input queued during the outage, are paced to ``ready.limits``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import websockets
from livekit import rtc
from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIStatusError,
    stt,
)
from livekit.agents.language import LanguageCode
from livekit.agents.types import NOT_GIVEN, NotGivenOr, TimedString
from livekit.agents.utils import AudioBuffer, is_given

from kitt_stt.integrations.link import (
    FRAME_MS,
    SAMPLE_RATE,
    LinkOptions,
    Pacer,
    Reframer,
    ReplayBuffer,
    backoff_delays,
    decode,
    encode,
)
from kitt_stt.integrations.turns import (
    Committed,
    Eager,
    Filtered,
    Partial,
    Resumed,
    ServerError,
    TurnEvent,
    TurnStarted,
    TurnTracker,
)

_PERMANENT = {"bad_frame", "bad_field", "bad_audio", "too_many_seats"}  # a retry would be refused again


class STT(stt.STT):
    def __init__(self, url: str, *, seat: str = "driver", language: str | None = None, hotwords: Sequence[str] = (),
                 token: str | None = None, eager: bool = True, interim: bool = True, keepalive_s: float = 10.0,
                 replay_max_ms: int = 30_000, backoff_min_s: float = 0.5, backoff_max_s: float = 8.0,
                 max_reconnects: int = 6, words: bool = True, start_options: dict[str, Any] | None = None) -> None:
        """``url``: the server's WebSocket endpoint (``ws://host:8000/stt/sensevoice``); ``token``: its
        ``server.auth_token``; ``eager``: ask for ``turn_eager``/``turn_resumed`` (preflight
        transcripts); ``words``: word timings and confidence for the finals (where the engine
        times words); ``start_options``: further ``start`` fields (``wake``, ``text``)."""
        extra_start = {"words": words, **(start_options or {})}
        super().__init__(capabilities=stt.STTCapabilities(
            streaming=True, interim_results=True, offline_recognize=True, manual_flush=True,
            aligned_transcript="word" if extra_start["words"] is True else False))
        self._options = LinkOptions(url=url, seat=seat, language=language, hotwords=tuple(hotwords), token=token,
                                    eager=eager, interim=interim, client="livekit-agents", keepalive_s=keepalive_s,
                                    replay_max_ms=replay_max_ms, backoff_min_s=backoff_min_s,
                                    backoff_max_s=backoff_max_s, max_reconnects=max_reconnects,
                                    extra_start=extra_start)
        self._streams: weakref.WeakSet[RecognizeStream] = weakref.WeakSet()

    @property
    def model(self) -> str:
        return "kitt-stt"

    @property
    def provider(self) -> str:
        return "kitt-stt"

    def _engine_is(self, ready: dict[str, Any]) -> None:
        """The server's engine cannot time words: no aligned transcript to promise."""
        if self._capabilities.aligned_transcript and not ready.get("model", {}).get("words", False):
            self._capabilities.aligned_transcript = False

    def update_options(self, *, language: NotGivenOr[str | None] = NOT_GIVEN,
                       hotwords: NotGivenOr[Sequence[str]] = NOT_GIVEN) -> None:
        """New streams use these; open ones are reconfigured (from their next segment)."""
        changes: dict[str, Any] = {}
        if is_given(language):
            changes["language"] = language
        if is_given(hotwords):
            changes["hotwords"] = tuple(hotwords)
        self._options = replace(self._options, **changes)
        for stream in list(self._streams):
            stream.update_options(self._options)

    def stream(self, *, language: NotGivenOr[str] = NOT_GIVEN,
               conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> RecognizeStream:
        options = replace(self._options, language=language) if is_given(language) else self._options
        stream = RecognizeStream(stt=self, options=options, conn_options=conn_options)
        self._streams.add(stream)
        return stream

    async def _recognize_impl(self, buffer: AudioBuffer, *, language: NotGivenOr[str] = NOT_GIVEN,
                              conn_options: APIConnectOptions) -> stt.SpeechEvent:
        """A whole buffer: stream it, ``finalize``, and wait for the commit (none: nothing was said)."""
        options = replace(self._options, language=language) if is_given(language) else self._options
        frame = rtc.combine_audio_frames(buffer)
        if frame.sample_rate != SAMPLE_RATE:
            resampler = rtc.AudioResampler(frame.sample_rate, SAMPLE_RATE, num_channels=frame.num_channels)
            frame = rtc.combine_audio_frames([*resampler.push(frame), *resampler.flush()])
        pcm = _mono(frame)
        try:
            async with websockets.connect(options.url, additional_headers=options.headers(), max_size=1 << 22,
                                          open_timeout=conn_options.timeout) as websocket:
                ready = await _await_ready(websocket, conn_options.timeout)
                self._engine_is(ready)
                limits = ready.get("limits", {})
                await websocket.send(encode({**options.start_frame(), "eager": False, "interim": False}))
                reframer = Reframer()
                pacer = Pacer(limits)
                for piece in [*reframer.push(pcm), *reframer.flush()]:
                    await pacer.wait()
                    await websocket.send(encode({"type": "audio", "seat": options.seat, "pcm": piece}))
                await websocket.send(encode({"type": "close"}))
                async for message in websocket:
                    reply = decode(message)
                    if reply.get("type") == "commit":
                        return _event(stt.SpeechEventType.FINAL_TRANSCRIPT, str(reply.get("text", "")),
                                      options.language)
                    if reply.get("type") == "error":
                        raise _api_error(reply)
        except (OSError, websockets.WebSocketException, asyncio.TimeoutError) as exc:
            raise APIConnectionError(f"kitt-stt at {options.url}: {exc}") from exc
        return _event(stt.SpeechEventType.FINAL_TRANSCRIPT, "", options.language)


class RecognizeStream(stt.RecognizeStream):
    def __init__(self, *, stt: STT, options: LinkOptions, conn_options: APIConnectOptions) -> None:
        super().__init__(stt=stt, conn_options=conn_options)
        self._model = stt  # ours (the base class keeps it as a plain ``stt.STT``)
        self._options = options
        self._replay = ReplayBuffer(options.replay_max_ms, options.idle_keep_ms)
        self._tracker = TurnTracker(options.seat, self._replay)
        self._reframer = Reframer()
        self._downsampler: rtc.AudioResampler | None = None  # not `_resampler`: the base class uses that name
        self._websocket: websockets.ClientConnection | None = None
        self._last_sent = time.monotonic()
        self._sent_ms = 0  # audio of this stream sent so far (replays not counted twice)
        self._reported_ms = 0  # of which RECOGNITION_USAGE has told
        self._origin_ms = 0  # where in the stream the current connection's audio clock starts
        self.ready: dict[str, Any] | None = None  # the server's last ``ready`` frame
        self.reconnects = 0

    def update_options(self, options: LinkOptions) -> None:
        self._options = replace(options, seat=self._options.seat)
        websocket = self._websocket
        if websocket is not None:
            configure = {"type": "configure", "hotwords": list(options.hotwords)}
            if options.language is not None:
                configure["language"] = options.language
            asyncio.ensure_future(_send_quietly(websocket, configure))  # noqa: RUF006 - fire and forget

    async def _run(self) -> None:
        """Connect, and reconnect with backoff until the input ends and the server has flushed."""
        delays = backoff_delays(self._options.backoff_min_s, self._options.backoff_max_s, self._options.max_reconnects)
        last_error: Exception | None = None
        while True:
            try:
                if await self._session():
                    self._report_usage()
                    return
                last_error = ConnectionError("the server closed the session")
                delays = backoff_delays(self._options.backoff_min_s, self._options.backoff_max_s,
                                        self._options.max_reconnects)  # it was up: a fresh budget
            except (OSError, websockets.WebSocketException, asyncio.TimeoutError) as exc:
                last_error = exc
            delay = next(delays, None)
            if delay is None:
                raise APIConnectionError(f"kitt-stt at {self._options.url} unreachable after "
                                         f"{self._options.max_reconnects} attempts: {last_error}", retryable=False)
            self.reconnects += 1
            await asyncio.sleep(delay)

    async def _session(self) -> bool:
        """One connection; True when it ended because the input did (nothing left to do)."""
        options = self._options
        async with websockets.connect(options.url, additional_headers=options.headers(), max_size=1 << 22,
                                      open_timeout=self._conn_options.timeout) as websocket:
            self.ready = await _await_ready(websocket, self._conn_options.timeout)
            self._model._engine_is(self.ready)
            self._replay.limit_to(int(self.ready.get("limits", {}).get("burst_ms", 10_000)))
            await websocket.send(encode(options.start_frame()))
            self._origin_ms = self._sent_ms - len(self._replay) * FRAME_MS  # the server's 0 ms
            pacer = Pacer(self.ready.get("limits", {}))  # the replay, then the input queued during an outage
            if len(self._replay):
                self._tracker.reconnected()
                for pcm in self._replay:
                    await pacer.wait()
                    await websocket.send(encode({"type": "audio", "seat": options.seat, "pcm": pcm}))
            self._websocket = websocket
            sender = asyncio.create_task(self._send_input(websocket, pacer))
            keepalive = asyncio.create_task(self._keepalive(websocket))
            try:
                await self._receive(websocket)
            finally:
                self._websocket = None
                for task in (sender, keepalive):
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            return sender.done() and not sender.cancelled() and sender.exception() is None and sender.result()

    async def _send_input(self, websocket: websockets.ClientConnection, pacer: Pacer) -> bool:
        seat = self._options.seat
        async for item in self._input_ch:
            if isinstance(item, rtc.AudioFrame):
                frames = self._reframer.push(self._to_16k_mono(item))
            else:  # the framework's flush: commit the turn now
                tail = b"".join(bytes(f.data) for f in self._downsampler.flush()) if self._downsampler else b""
                frames = self._reframer.push(tail) + self._reframer.flush()
            for pcm in frames:
                self._replay.add(pcm)
                self._sent_ms += FRAME_MS
                await pacer.wait()
                await websocket.send(encode({"type": "audio", "seat": seat, "pcm": pcm}))
            if not isinstance(item, rtc.AudioFrame):
                await websocket.send(encode({"type": "finalize", "seat": seat}))
            self._last_sent = time.monotonic()
        await websocket.send(encode({"type": "close"}))  # input ended: the server flushes, then closes
        return True

    def _report_usage(self) -> None:
        """``RECOGNITION_USAGE`` with the audio sent since the last report (LiveKit adds them up)."""
        unreported = self._sent_ms - self._reported_ms
        if unreported > 0:
            self._reported_ms = self._sent_ms
            self._event_ch.send_nowait(stt.SpeechEvent(
                type=stt.SpeechEventType.RECOGNITION_USAGE,
                recognition_usage=stt.RecognitionUsage(audio_duration=unreported / 1000.0)))

    def _to_16k_mono(self, frame: rtc.AudioFrame) -> bytes:
        mono = _mono(frame)
        if frame.sample_rate == SAMPLE_RATE:
            return mono
        if self._downsampler is None:
            self._downsampler = rtc.AudioResampler(frame.sample_rate, SAMPLE_RATE, num_channels=1,
                                                 quality=rtc.AudioResamplerQuality.HIGH)
        pushed = rtc.AudioFrame(mono, frame.sample_rate, 1, len(mono) // 2)
        return b"".join(bytes(piece.data) for piece in self._downsampler.push(pushed))

    async def _keepalive(self, websocket: websockets.ClientConnection) -> None:
        interval = self._options.keepalive_s
        while True:
            await asyncio.sleep(min(1.0, interval))
            if time.monotonic() - self._last_sent >= interval:
                await websocket.send(encode({"type": "ping", "id": "keepalive"}))
                self._last_sent = time.monotonic()

    async def _receive(self, websocket: websockets.ClientConnection) -> None:
        with contextlib.suppress(websockets.ConnectionClosed):
            async for message in websocket:
                for event in self._tracker.on_frame(decode(message)):
                    self._emit(event)

    def _emit(self, event: TurnEvent) -> None:
        language = self._options.language
        kind = stt.SpeechEventType
        if isinstance(event, TurnStarted):
            self._event_ch.send_nowait(stt.SpeechEvent(type=kind.START_OF_SPEECH))
        elif isinstance(event, Partial | Resumed):
            self._event_ch.send_nowait(_event(kind.INTERIM_TRANSCRIPT, event.text, language))
        elif isinstance(event, Eager):
            self._event_ch.send_nowait(_event(kind.PREFLIGHT_TRANSCRIPT, event.text, language))
        elif isinstance(event, Committed):
            offset = self.start_time_offset * 1000.0 + self._origin_ms  # stream time of the server's 0 ms
            start = (offset + (event.start_ms or 0)) / 1000.0
            end = (offset + (event.end_ms or event.start_ms or 0)) / 1000.0
            final = _event(kind.FINAL_TRANSCRIPT, event.text, event.language or language, start, end,
                           confidence=float(event.frame.get("confidence", 0.0)))
            final.alternatives[0].metadata = {"commit": event.frame}
            if event.words:
                final.alternatives[0].words = [_timed(word, offset / 1000.0) for word in event.words]
            self._event_ch.send_nowait(final)
            self._event_ch.send_nowait(stt.SpeechEvent(type=kind.END_OF_SPEECH))
            self._report_usage()
        elif isinstance(event, Filtered):
            self._event_ch.send_nowait(stt.SpeechEvent(type=kind.END_OF_SPEECH))
            self._report_usage()
        elif isinstance(event, ServerError):
            self._emit_error(_api_error({"code": event.code, "message": event.message}),
                             recoverable=event.code not in _PERMANENT)


def _timed(word: dict[str, Any], offset_s: float) -> TimedString:
    """One of a final's ``words`` (seat clock, ms) in stream time, as LiveKit's own STTs give words."""
    return TimedString(str(word.get("text", "")), start_time=offset_s + int(word.get("start_ms", 0)) / 1000.0,
                       end_time=offset_s + int(word.get("end_ms", 0)) / 1000.0,
                       confidence=float(word.get("confidence", 0.0)), start_time_offset=offset_s)


def _mono(frame: rtc.AudioFrame) -> bytes:
    samples = np.frombuffer(frame.data, dtype=np.int16)
    if frame.num_channels > 1:
        samples = samples.reshape(-1, frame.num_channels).mean(axis=1).astype(np.int16)
    return samples.tobytes()


def _event(kind: stt.SpeechEventType, text: str, language: str | None, start: float = 0.0,
           end: float = 0.0, confidence: float = 0.0) -> stt.SpeechEvent:
    """``confidence``: the commit's (sessions with ``words: true`` on an engine that times words);
    otherwise LiveKit's own default 0, "not known", rather than an invented 1."""
    data = stt.SpeechData(language=LanguageCode(language or ""), text=text, start_time=start, end_time=end,
                          confidence=confidence)
    return stt.SpeechEvent(type=kind, alternatives=[data])


def _api_error(frame: dict[str, Any]) -> APIStatusError:
    code = str(frame.get("code"))
    return APIStatusError(f"kitt-stt {code}: {frame.get('message')}", body=frame, retryable=code not in _PERMANENT,
                          status_code=400 if code in _PERMANENT else -1)


async def _await_ready(websocket: websockets.ClientConnection, timeout: float) -> dict[str, Any]:
    first = decode(await asyncio.wait_for(websocket.recv(), timeout))
    if first.get("type") != "ready":
        raise ConnectionError(f"kitt-stt refused the session: {first.get('code')}: {first.get('message')}")
    return first


async def _send_quietly(websocket: websockets.ClientConnection, frame: dict[str, Any]) -> None:
    with contextlib.suppress(websockets.ConnectionClosed):
        await websocket.send(encode(frame))


__all__ = ["STT", "RecognizeStream"]
