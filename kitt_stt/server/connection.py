"""One WebSocket session: decode client frames, route them to seats, send server frames in order.

Inbound frames are handled one at a time on the event loop, read at most
``server.max_messages_per_s`` messages and ``server.max_read_bytes_per_s`` bytes a second; a
bad frame yields one ``error`` frame and the session goes on.  Outbound frames go through the
session's ``Outbox`` (one queue, one sender: frames leave in the order the pipeline emitted
them); a client that does not read them is closed as a slow consumer (``server/outbox.py``).

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
import time
import uuid
from collections.abc import Iterable
from functools import partial

import numpy as np
from starlette.websockets import WebSocket, WebSocketDisconnect

from kitt_stt.audio.vad import EndReason
from kitt_stt.hotwords import Hotword, parse_hotwords
from kitt_stt.observability.logbuffer import session_id as session_context
from kitt_stt.observability.trace import Track
from kitt_stt.pipeline.admission import Admission
from kitt_stt.pipeline.eot import EotPolicy, HoldRule, SilenceTimeoutPolicy, TurnSensePolicy
from kitt_stt.pipeline.rate_limit import AudioRateLimiter, MessagePacer, TokenBucket
from kitt_stt.pipeline.seat import SeatObservers, SeatPipeline
from kitt_stt.pipeline.settings import SessionSettings, auto_languages, checked_languages
from kitt_stt.protocol.codec import decode_client_frame, encode_server_frame
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import (
    AudioFrame,
    ClientFrame,
    CloseFrame,
    ConfigureFrame,
    ErrorFrame,
    FinalizeFrame,
    Limits,
    ModelInfo,
    PingFrame,
    PongFrame,
    ReadyFrame,
    ServerFrame,
    StartFrame,
    VadFrame,
)
from kitt_stt.quote import quoted
from kitt_stt.server.audio_checks import SAMPLE_RATE, checked_pcm_bytes
from kitt_stt.server.failures import flush_all, log_task_failure
from kitt_stt.server.hotword_changes import HotwordChanges
from kitt_stt.server.outbox import Outbox, OutboxLimits, Outgoing, Overflow
from kitt_stt.server.stage_updates import updated_stage
from kitt_stt.server.state import ServiceState
from kitt_stt.server.ws_transport import reset_unread
from kitt_stt.text import TextStage

log = logging.getLogger(__name__)

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
            languages=auto_languages(asr.auto_languages, state.engine.info.languages), words=asr.words,
        )
        self._seats: dict[str, SeatPipeline] = {}
        self._limiters: dict[str, AudioRateLimiter] = {}
        server = self._config.server
        self._outbox = Outbox(OutboxLimits(server.outbound_queue_frames, server.max_outbox_bytes, server.send_stall_s),
                              self._on_overflow)
        self._metrics = state.metrics
        self._tracer = state.tracer
        self._pid = self._tracer.new_process(f"session {self.session_id[:8]}") if self._tracer else 0
        self._track = Track(self._pid, 0)
        self._sender: asyncio.Task[None] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._admission = Admission(self._config, state.scheduler, self)
        self._pacer = MessagePacer(server.max_messages_per_s)
        self._byte_pacer = TokenBucket(server.max_read_bytes_per_s, server.max_read_bytes_per_s)  # bytes, likewise
        self._bytes_paid_at = 0.0
        self._hotword_changes = HotwordChanges(server.hotword_changes, asr.hotwords, self._settings.decode_hotwords(),
                                               biased=state.engine.info.hotwords)
        self._finished = asyncio.Event()
        self._closing = False  # the socket is going away: stop reading
        self._draining = False  # seats are being flushed: read and discard
        self._finishing: asyncio.Task[None] | None = None
        self._aborting: asyncio.Task[None] | None = None

    # ----- outbound ----------------------------------------------------------------------------

    def send(self, frame: ServerFrame) -> None:
        if self._finished.is_set() or self._outbox.overflowed:
            return
        payload = encode_server_frame(frame)
        kind = frame.type  # type: ignore[attr-defined]
        if self._outbox.put(Outgoing(payload, kind, getattr(frame, "seat", None))):
            self._metrics.observe_frame_out(frame, kind)

    def _on_overflow(self, reason: Overflow, dropped_bytes: int) -> None:
        """The client does not read: drop its queue, tell it why if it ever reads again, close."""
        server = self._config.server
        log.warning("session %s: client does not read its frames (%s: %d bytes queued; limits %d frames, %d bytes, "
                    "%g s without draining); closing with %d (slow_consumer)", self.session_id, reason, dropped_bytes,
                    server.outbound_queue_frames, server.max_outbox_bytes, server.send_stall_s, CLOSE_TRY_AGAIN_LATER)
        self._metrics.slow_consumers.labels(reason.value).inc()
        self._metrics.errors.labels(ErrorCode.SLOW_CONSUMER.value).inc()
        self._draining = True  # read and discard until the close: unread input would reset the socket first
        farewell = ErrorFrame(code=ErrorCode.SLOW_CONSUMER.value, fatal=True,
                              message=f"the client did not read its frames ({reason}); queued frames were dropped")
        self._outbox.put_last(Outgoing(encode_server_frame(farewell), "error", None))
        self._aborting = asyncio.get_running_loop().create_task(self._abort())

    async def _abort(self) -> None:
        """Close a slow consumer, stop its reader if its close does not end it, reset what it leaves unread."""
        await self._close_socket(CLOSE_TRY_AGAIN_LATER, ErrorCode.SLOW_CONSUMER.value)
        read_by = asyncio.get_running_loop().time() + self._config.server.send_stall_s  # then reset_unread
        if self._reader is not None:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(self._reader), self._config.server.send_stall_s)
        await reset_unread(self._ws.scope, self.session_id, read_by)
        if self._reader is not None:
            self._reader.cancel()

    async def _send_traced(self, item: Outgoing) -> None:
        tracer = self._tracer
        started = tracer.now_us() if tracer else 0
        await self._ws.send_bytes(item.payload)
        if tracer:
            tracer.add("ws.send", "ws", started, tracer.now_us() - started, self._seat_track(item.seat),
                       {"session": self.session_id, "seat": item.seat, "type": item.kind})

    def _seat_track(self, seat: str | None) -> Track:
        pipeline = self._seats.get(seat) if seat else None
        return pipeline.track if pipeline is not None else self._track

    def _error(self, error: ProtocolError) -> None:
        self.send(ErrorFrame(code=error.code.value, message=error.message, fatal=error.fatal, seat=error.seat))

    # ----- session -----------------------------------------------------------------------------

    async def serve(self) -> None:
        session_context.set(self.session_id)
        self._metrics.connections_total.inc()
        self._sender = asyncio.create_task(self._outbox.run(self._send_traced))
        self.send(self._ready_frame())
        self._reader = asyncio.create_task(self._receive_loop())
        try:
            await asyncio.wait([self._reader])  # a slow consumer's close cancels the reader, not this
            if not self._reader.cancelled() and (failure := self._reader.exception()) is not None:
                raise failure
        finally:
            self._reader.cancel()
            await self._release()

    def _ready_frame(self) -> ReadyFrame:
        info = self._state.engine.info
        server = self._config.server
        return ReadyFrame(
            session_id=self.session_id,
            model=ModelInfo(name=info.name, kind=info.kind, provider=info.provider, hotwords=info.hotwords,
                            words=info.words),
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
            pause = max(self._pacer.delay_for(1.0), self._bytes_paid_at - time.monotonic())
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                message = await asyncio.wait_for(self._ws.receive(), None if self._draining else idle_s)
            except asyncio.TimeoutError:  # not the builtin on 3.10
                if self._draining:
                    continue  # the timer was armed before a drain began; the drain owns the session now
                await self._idle_out(idle_s or 0.0)
                return
            except WebSocketDisconnect:
                return
            except RuntimeError as exc:  # the socket in a state it should not be in: worth knowing
                log.warning("session %s: receiving failed: %s", self.session_id, exc)
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
            self._bytes_paid_at = time.monotonic() + self._byte_pacer.delay_for(len(payload))
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

    async def _close_socket(self, code: int, reason: str = "") -> None:
        """Let the sender finish, then close; each step waits at most as long as a stalled socket
        is given (``server.send_stall_s``), so a client that never reads cannot hold the session."""
        if self._finished.is_set():
            return
        self._finished.set()
        self._outbox.end()
        stall_s = self._config.server.send_stall_s
        if self._sender is not None:
            try:  # the sender's sends are bounded, one stall and the farewell at most
                await asyncio.wait_for(asyncio.shield(self._sender), 2 * stall_s + 1)
            except asyncio.TimeoutError:  # not the builtin on 3.10
                self._sender.cancel()
        try:
            await asyncio.wait_for(self._ws.close(code, reason), stall_s)
        except (asyncio.TimeoutError, WebSocketDisconnect, OSError):
            pass  # the peer is gone or does not read: nothing more can reach it
        except RuntimeError as exc:
            log.warning("session %s: closing the socket failed: %s", self.session_id, exc)

    async def _flush_seats(self, seats: Iterable[SeatPipeline], reason: EndReason) -> None:
        await flush_all(seats, reason, self.session_id)

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
            self._outbox.end()
        if self._sender is not None and not self._sender.done():
            self._sender.cancel()

    @property
    def buffered_bytes(self) -> int:
        """Audio held by this session's seats plus encoded frames waiting for the socket."""
        return sum(seat.buffered_bytes for seat in self._seats.values()) + self._outbox.bytes

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
        given = self._hotword_changes.given(frame.hotwords)
        settings = self._updated_settings(frame.language, frame.interim, given, frame.eager)
        if frame.wake is not None or frame.text is not None:
            settings = settings.updated(stage=updated_stage(self._settings.stage, frame.wake, frame.text))
        if frame.languages is not None:
            settings = settings.updated(languages=checked_languages(frame.languages, self._state.engine.info.languages))
        settings = settings.updated(words=frame.words)
        decoding = settings.decode_hotwords()  # wake phrases are hotwords too: charged once the frame is applied
        if self._hotword_changes.charge(decoding) and decoding:
            await self._prepare_hotwords(decoding)
        self._settings = settings
        self._hotword_changes.applied(given, decoding)
        if isinstance(frame, StartFrame):
            if frame.client:
                log.info("session %s: client %s", self.session_id, quoted(frame.client))
            for seat in frame.seats or []:
                self._seat(seat)

    async def _prepare_hotwords(self, hotwords: tuple[Hotword, ...]) -> None:
        """Build the hotword biasing structure now, on a thread: a decode worker must not pay
        for it, and the event loop must not block on it."""
        try:
            await asyncio.to_thread(self._state.engine.prepare_hotwords, hotwords)
        except Exception as exc:
            log.exception("session %s: preparing hotwords failed", self.session_id)
            raise ProtocolError(ErrorCode.BAD_FIELD, f"hotwords could not be prepared: {quoted(str(exc))}") from None

    def _updated_settings(self, language: str | None, interim: bool | None,
                          hotwords: list[str] | None, eager: bool | None) -> SessionSettings:
        languages = self._state.engine.info.languages
        if language is not None and language not in languages:
            raise ProtocolError(ErrorCode.BAD_FIELD,
                                f"language {quoted(language)} is not supported by this model; "
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

    def _on_finalize(self, frame: FinalizeFrame) -> None:
        if frame.seat is None:
            seats = list(self._seats.values())
        else:
            seats = [self._seats[frame.seat]] if frame.seat in self._seats else []
        for seat in seats:
            task = seat.flush(EndReason.FINALIZE)
            if task is not None:
                task.add_done_callback(partial(log_task_failure,
                                               what=f"session {self.session_id} seat {seat.seat}: finalize"))

    def _on_audio(self, frame: AudioFrame) -> None:
        size = checked_pcm_bytes(frame, self._config.server.max_frame_ms)
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
                                f"this connection already has {limit} seats; seat {quoted(name)} refused", name)
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

