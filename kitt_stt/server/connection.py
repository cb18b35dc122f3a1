"""One WebSocket session: decode client frames, route them to seats, send server frames in order.

Inbound frames are handled one at a time on the event loop; a bad frame yields one ``error``
frame and the session goes on.  Outbound frames go through one queue drained by one sender
task, so frames leave in exactly the order the pipeline emitted them.

Ending a session: a client ``close`` or a server drain (SIGTERM) flushes every seat (finals,
then commits with reason ``stop``) and closes with 1000.  While that flush runs the receive loop
keeps reading and discards what arrives: a client that streams on through a rollout must not
make the session end before its finals are out.  A session that sends nothing for
``server.idle_timeout_s`` is flushed the same way and closed with 1008.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Iterable
from typing import TypeVar

import numpy as np
from pydantic import BaseModel, ValidationError
from starlette.websockets import WebSocket, WebSocketDisconnect

from kitt_stt.audio.vad import EndReason
from kitt_stt.hotwords import Hotword, parse_hotwords
from kitt_stt.observability.logbuffer import session_id as session_context
from kitt_stt.observability.trace import Track
from kitt_stt.pipeline.admission import Admission
from kitt_stt.pipeline.eot import EotPolicy, HoldRule, SilenceTimeoutPolicy, TurnSensePolicy
from kitt_stt.pipeline.rate_limit import AudioRateLimiter, MessagePacer
from kitt_stt.pipeline.seat import SeatObservers, SeatPipeline
from kitt_stt.pipeline.settings import SessionSettings, auto_languages, checked_languages
from kitt_stt.protocol.codec import decode_client_frame, encode_server_frame
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import (
    AudioFrame,
    ClientFrame,
    CloseFrame,
    CommitFrame,
    ConfigureFrame,
    ErrorFrame,
    FinalFrame,
    FinalizeFrame,
    Limits,
    ModelInfo,
    PingFrame,
    PongFrame,
    ReadyFrame,
    ServerFrame,
    StartFrame,
    TextFields,
    VadFrame,
    WakeFields,
)
from kitt_stt.server.state import ServiceState
from kitt_stt.text import TextSettings, TextStage, WakeSettings

SettingsT = TypeVar("SettingsT", bound=BaseModel)

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
BYTES_PER_10MS = SAMPLE_RATE // 100 * 2
CLOSE_NORMAL = 1000
CLOSE_POLICY_VIOLATION = 1008  # idle timeout
CLOSE_TRY_AGAIN_LATER = 1013


class Connection:
    def __init__(self, websocket: WebSocket, state: ServiceState) -> None:
        self.session_id = uuid.uuid4().hex
        self._ws = websocket
        self._state = state
        self._config = state.config
        asr = self._config.asr
        self._settings = SessionSettings(
            language=asr.language, use_itn=asr.use_itn, interim=self._config.interim.enabled,
            hotwords=parse_hotwords(asr.hotwords), eager=self._config.turn.eager_events,
            stage=TextStage(self._config.text, self._config.wake), switch_margin=asr.language_switch_margin,
            languages=auto_languages(asr.auto_languages, state.engine.info.languages),
        )
        self._seats: dict[str, SeatPipeline] = {}
        self._limiters: dict[str, AudioRateLimiter] = {}
        self._outbox: asyncio.Queue[tuple[bytes, str, str | None] | None] = asyncio.Queue()
        self._outbox_bytes = 0
        self._metrics = state.metrics
        self._tracer = state.tracer
        self._pid = self._tracer.new_process(f"session {self.session_id[:8]}") if self._tracer else 0
        self._track = Track(self._pid, 0)
        self._sender: asyncio.Task[None] | None = None
        self._admission = Admission(self._config, state.scheduler, self)
        self._pacer = MessagePacer(self._config.server.max_messages_per_s)
        self._finished = asyncio.Event()
        self._closing = False  # the socket is going away: stop reading
        self._draining = False  # seats are being flushed: read and discard
        self._finishing: asyncio.Task[None] | None = None
        self._aborting: asyncio.Task[None] | None = None

    # ----- outbound ----------------------------------------------------------------------------

    def send(self, frame: ServerFrame) -> None:
        if self._finished.is_set():
            return
        if self._outbox.qsize() >= self._config.server.outbound_queue_frames:
            if not self._closing:
                log.warning("session %s: client does not read its frames; closing", self.session_id)
                self._closing = True
                self._aborting = asyncio.get_running_loop().create_task(self._close_socket(CLOSE_TRY_AGAIN_LATER))
            return
        payload = encode_server_frame(frame)
        kind = frame.type  # type: ignore[attr-defined]
        self._observe_outbound(frame, kind)
        self._outbox_bytes += len(payload)
        self._outbox.put_nowait((payload, kind, getattr(frame, "seat", None)))

    def _observe_outbound(self, frame: ServerFrame, kind: str) -> None:
        metrics = self._metrics
        metrics.frames_out.labels(kind).inc()
        if isinstance(frame, FinalFrame):
            metrics.final_latency.observe(frame.server_latency_ms / 1000.0)
        elif isinstance(frame, CommitFrame):
            decision = frame.metadata["eot"]["decision"]
            metrics.commits.labels(decision["reason"]).inc()
            metrics.eot_latency.observe(decision["wait_ms"] / 1000.0)
        elif isinstance(frame, ErrorFrame):
            metrics.errors.labels(frame.code).inc()

    async def _send_loop(self) -> None:
        tracer = self._tracer
        try:
            while (item := await self._outbox.get()) is not None:
                payload, kind, seat = item
                self._outbox_bytes -= len(payload)
                started = tracer.now_us() if tracer else 0
                await self._ws.send_bytes(payload)
                if tracer:
                    tracer.add("ws.send", "ws", started, tracer.now_us() - started, self._seat_track(seat),
                               {"session": self.session_id, "seat": seat, "type": kind})
        except (WebSocketDisconnect, RuntimeError, OSError):
            self._closing = True  # the peer is gone; the receive loop will notice

    def _seat_track(self, seat: str | None) -> Track:
        pipeline = self._seats.get(seat) if seat else None
        return pipeline.track if pipeline is not None else self._track

    def _error(self, error: ProtocolError) -> None:
        self.send(ErrorFrame(code=error.code.value, message=error.message, fatal=error.fatal, seat=error.seat))

    # ----- session -----------------------------------------------------------------------------

    async def serve(self) -> None:
        session_context.set(self.session_id)
        self._metrics.connections_total.inc()
        self._sender = asyncio.create_task(self._send_loop())
        self.send(self._ready_frame())
        try:
            await self._receive_loop()
        finally:
            await self._release()

    def _ready_frame(self) -> ReadyFrame:
        info = self._state.engine.info
        server = self._config.server
        return ReadyFrame(
            session_id=self.session_id,
            model=ModelInfo(name=info.name, kind=info.kind, provider=info.provider, hotwords=info.hotwords),
            limits=Limits(
                sample_rate=SAMPLE_RATE, frame_ms=20, max_frame_ms=server.max_frame_ms,
                max_seats=server.max_seats, max_segment_ms=self._config.vad.max_segment_ms,
                realtime_factor=server.rate_limit.realtime_factor, burst_ms=server.rate_limit.burst_ms,
            ),
        )

    async def _receive_loop(self) -> None:
        idle_s = self._config.server.idle_timeout_s or None
        while not self._closing:
            # Reading slower than a flooding client sends lets TCP push back on it: its messages
            # wait in its own socket buffers instead of taking the event loop from everyone else.
            pause = self._pacer.delay_for(1.0)
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                message = await asyncio.wait_for(self._ws.receive(), None if self._draining else idle_s)
            except asyncio.TimeoutError:  # not the builtin on 3.10
                if self._draining:
                    continue  # the timer was armed before a drain began; the drain owns the session now
                await self._idle_out(idle_s or 0.0)
                return
            except (WebSocketDisconnect, RuntimeError):
                return
            if message["type"] == "websocket.disconnect":
                return
            if self._draining:
                continue  # the flush took what was said before it began; the rest is discarded
            payload = message.get("bytes")
            if payload is None:
                self._error(ProtocolError(ErrorCode.BAD_FRAME,
                                          "text messages are not accepted: send one binary msgpack map per message"))
                continue
            if await self._handle(payload):
                return

    async def _handle(self, payload: bytes) -> bool:
        """Handle one binary message; True when it was ``close`` and the session is over."""
        started = self._tracer.now_us() if self._tracer else 0
        kind, seat = "invalid", None
        try:
            frame = decode_client_frame(payload)
            kind, seat = frame.type, getattr(frame, "seat", None)  # type: ignore[attr-defined]
            self._metrics.frames_in.labels(kind).inc()
            if isinstance(frame, CloseFrame):
                await self._finish(EndReason.STOP)
                return True
            if isinstance(frame, StartFrame | ConfigureFrame):
                await self._on_settings(frame)
            else:
                self._dispatch(frame)
        except ProtocolError as error:
            self._error(error)
        except Exception:
            log.exception("session %s: frame handling failed", self.session_id)
            self._error(ProtocolError(ErrorCode.INTERNAL, "internal error while handling the frame"))
        finally:
            if self._tracer:
                self._tracer.add("ws.receive", "ws", started, self._tracer.now_us() - started,
                                 self._seat_track(seat), {"session": self.session_id, "seat": seat, "type": kind})
        return False

    async def shutdown(self) -> None:
        """Server is stopping: flush every seat (reason ``stop``) and close with 1000."""
        await self._finish(EndReason.STOP)

    async def _finish(self, reason: EndReason, code: int = CLOSE_NORMAL, farewell: ErrorFrame | None = None) -> None:
        """End the session once, however many ask (client ``close``, idle timeout, server drain):
        every caller waits for the same flush, so a drain never returns while a ``close`` that
        arrived first is still flushing."""
        if self._finishing is None:
            if self._closing:
                return
            self._draining = True
            self._finishing = asyncio.create_task(self._flush_and_close(reason, code, farewell))
        await asyncio.shield(self._finishing)

    async def _flush_and_close(self, reason: EndReason, code: int, farewell: ErrorFrame | None) -> None:
        """Flush every seat, send ``farewell`` (after the finals and commits it must not hide), close."""
        await self._flush_seats(self._seats.values(), reason)
        if farewell is not None:
            self.send(farewell)
        await self._close_socket(code)

    async def _idle_out(self, idle_s: float) -> None:
        log.info("session %s: nothing received for %.0f s; closing", self.session_id, idle_s)
        farewell = ErrorFrame(code=ErrorCode.IDLE_TIMEOUT.value, fatal=True,
                              message=f"nothing received for {idle_s:g} s (server.idle_timeout_s); send audio or "
                                      "ping to keep a session open")
        await self._finish(EndReason.STOP, CLOSE_POLICY_VIOLATION, farewell)

    async def _close_socket(self, code: int) -> None:
        if self._finished.is_set():
            return
        self._finished.set()
        self._outbox.put_nowait(None)
        if self._sender is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._sender), timeout=5)
            except asyncio.TimeoutError:  # not the builtin on 3.10
                self._sender.cancel()
        with contextlib.suppress(RuntimeError, OSError):
            await self._ws.close(code)

    async def _flush_seats(self, seats: Iterable[SeatPipeline], reason: EndReason) -> None:
        tasks = [task for seat in list(seats) if (task := seat.flush(reason)) is not None]
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _release(self) -> None:
        """Whatever ended the session: cancel its decodes and free every buffer it held."""
        self._closing = True
        self._state.scheduler.cancel_owner(self)
        for seat in self._seats.values():
            seat.close()
        self._seats.clear()
        self._limiters.clear()
        if self._tracer:
            self._tracer.forget_process(self._pid)
        if not self._finished.is_set():
            self._finished.set()
            self._outbox.put_nowait(None)
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()

    @property
    def buffered_bytes(self) -> int:
        """Audio held by this session's seats plus encoded frames waiting for the socket."""
        return sum(seat.buffered_bytes for seat in self._seats.values()) + self._outbox_bytes

    @property
    def seat_count(self) -> int:
        return len(self._seats)

    # ----- frames ------------------------------------------------------------------------------

    def _dispatch(self, frame: ClientFrame) -> None:
        if isinstance(frame, AudioFrame):
            self._on_audio(frame)
        elif isinstance(frame, VadFrame):
            self._seat(frame.seat).client_vad(frame.event)
        elif isinstance(frame, FinalizeFrame):
            self._on_finalize(frame)
        elif isinstance(frame, PingFrame):
            self.send(PongFrame(id=frame.id))

    async def _on_settings(self, frame: StartFrame | ConfigureFrame) -> None:
        settings = self._updated_settings(frame.language, frame.interim, frame.hotwords, frame.eager)
        if frame.wake is not None or frame.text is not None:
            settings = settings.updated(stage=self._updated_stage(frame.wake, frame.text))
        if frame.languages is not None:
            settings = settings.updated(languages=checked_languages(frame.languages, self._state.engine.info.languages))
        hotwords = settings.decode_hotwords()
        if hotwords and hotwords != self._settings.decode_hotwords() and self._state.engine.info.hotwords:
            await self._prepare_hotwords(hotwords)
        self._settings = settings
        if isinstance(frame, StartFrame):
            if frame.client:
                log.info("session %s: client %r", self.session_id, frame.client)
            for seat in frame.seats or []:
                self._seat(seat)

    async def _prepare_hotwords(self, hotwords: tuple[Hotword, ...]) -> None:
        """Build the hotword biasing structure now, on a thread: a decode worker must not pay
        for it, and the event loop must not block on it."""
        try:
            await asyncio.to_thread(self._state.engine.prepare_hotwords, hotwords)
        except Exception as exc:
            log.exception("session %s: preparing hotwords failed", self.session_id)
            raise ProtocolError(ErrorCode.BAD_FIELD, f"hotwords could not be prepared: {exc}") from None

    def _updated_settings(self, language: str | None, interim: bool | None,
                          hotwords: list[str] | None, eager: bool | None) -> SessionSettings:
        languages = self._state.engine.info.languages
        if language is not None and language not in languages:
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"language {language!r} is not supported by this model; "
                                f"use one of {', '.join(languages)}")
        parsed = None
        if hotwords and not self._state.engine.info.hotwords:
            log.info("session %s: hotwords accepted but not applied (the %s engine cannot bias decoding)",
                     self.session_id, self._state.engine.info.kind)
        if hotwords is not None:
            try:
                parsed = parse_hotwords(hotwords)
            except ValueError as exc:
                raise ProtocolError(ErrorCode.BAD_FIELD, f"hotwords: {exc}") from None
        return self._settings.updated(language=language, interim=interim, hotwords=parsed, eager=eager)

    def _updated_stage(self, wake: WakeFields | None, text: TextFields | None) -> TextStage:
        """The session's text stage with the fields given replacing the current ones."""
        stage = self._settings.stage
        wake_settings, text_settings = stage.wake_settings, stage.text_settings
        if wake is not None:
            wake_settings = _merged("wake", WakeSettings, wake_settings, wake)
        if text is not None:
            text_settings = _merged("text", TextSettings, text_settings, text)
        return TextStage(text_settings, wake_settings)

    def _on_finalize(self, frame: FinalizeFrame) -> None:
        if frame.seat is None:
            seats = list(self._seats.values())
        else:
            seats = [self._seats[frame.seat]] if frame.seat in self._seats else []
        for seat in seats:
            seat.flush(EndReason.FINALIZE)

    def _on_audio(self, frame: AudioFrame) -> None:
        if frame.sample_rate is not None and frame.sample_rate != SAMPLE_RATE:
            raise ProtocolError(ErrorCode.BAD_AUDIO,
                                f"sample_rate {frame.sample_rate} is not supported; send 16000 Hz mono int16",
                                frame.seat)
        size = len(frame.pcm)
        if size % BYTES_PER_10MS:
            raise ProtocolError(ErrorCode.BAD_AUDIO,
                                f"pcm is {size} bytes, not a whole number of 10 ms blocks "
                                f"({BYTES_PER_10MS} bytes of 16 kHz int16)", frame.seat)
        max_ms = self._config.server.max_frame_ms
        if size > max_ms * BYTES_PER_10MS // 10:
            raise ProtocolError(ErrorCode.BAD_AUDIO, f"pcm is {size // 32} ms; at most {max_ms} ms per frame",
                                frame.seat)
        seat = self._seat(frame.seat)
        if frame.seq is not None:
            if seat.last_seq is not None and frame.seq <= seat.last_seq:
                raise ProtocolError(ErrorCode.BAD_FIELD,
                                    f"seq {frame.seq} is not greater than the previous {seat.last_seq}; "
                                    "frame dropped as a duplicate", frame.seat)
            seat.last_seq = frame.seq
        if size == 0:
            return
        limiter = self._limiters[frame.seat]
        if not limiter.allow(size / 32.0):
            if limiter.should_complain():
                self._error(ProtocolError(ErrorCode.RATE_LIMITED,
                                          "audio is arriving faster than the allowed rate; frames are being dropped",
                                          frame.seat))
            seat.skip_audio(size // 2)
            return
        self._metrics.audio_seconds.inc(size / 32000.0)
        seat.push_audio(np.frombuffer(frame.pcm, dtype="<i2"))

    def _policy(self) -> EotPolicy:
        turn = self._config.turn
        hold = HoldRule.from_config(turn)
        if self._state.turn_model is None:
            return SilenceTimeoutPolicy(turn.wait_ms, hold)
        return TurnSensePolicy(turn.threshold, turn.wait_ms, hold, turn.eager_threshold)

    def _seat(self, name: str) -> SeatPipeline:
        seat = self._seats.get(name)
        if seat is not None:
            return seat
        limit = self._config.server.max_seats
        if len(self._seats) >= limit:
            raise ProtocolError(ErrorCode.TOO_MANY_SEATS,
                                f"this connection already has {limit} seats; seat {name!r} refused", name)
        track = Track(self._pid, len(self._seats) + 1)
        if self._tracer:
            self._tracer.name_track(track, f"seat {name}")
        seat = SeatPipeline(
            seat=name, config=self._config, settings=lambda: self._settings,
            scheduler=self._state.scheduler, policy=self._policy(), emit=self.send, owner=self,
            turn_model=self._state.turn_model,
            observe=SeatObservers(self._tracer, track, self.session_id, self._metrics),
            admission=self._admission,
        )
        self._seats[name] = seat
        self._limiters[name] = AudioRateLimiter(self._config.server.rate_limit)
        return seat


def _merged(name: str, model: type[SettingsT], current: SettingsT, given: ClientFrame) -> SettingsT:
    """``current`` with the fields the client gave, validated as a whole (``bad_field`` if not)."""
    try:
        return model.model_validate({**current.model_dump(), **given.model_dump(exclude_none=True)})
    except ValidationError as exc:
        problems = "; ".join((f"{'.'.join(map(str, error['loc']))}: " if error["loc"] else "")
                             + error["msg"].removeprefix("Value error, ") for error in exc.errors())
        raise ProtocolError(ErrorCode.BAD_FIELD, f"{name}: {problems}") from None
