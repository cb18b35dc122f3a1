"""One WebSocket session: decode client frames, route them to seats, send server frames in order.

Its seats (creation, limits, per-seat audio checks) are ``server/seats.py``'s; its settings and
how ``start``/``configure`` change them, ``server/session_updates.py``'s.

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

from starlette.websockets import WebSocket, WebSocketDisconnect

from kitt_stt.audio.vad import EndReason
from kitt_stt.observability.logbuffer import session_id as session_context
from kitt_stt.observability.trace import Track
from kitt_stt.pipeline.admission import Admission
from kitt_stt.pipeline.rate_limit import MessagePacer, TokenBucket
from kitt_stt.pipeline.seat import SeatPipeline
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
from kitt_stt.server.audio_checks import SAMPLE_RATE
from kitt_stt.server.failures import flush_all, log_task_failure
from kitt_stt.server.outbox import Outbox, OutboxLimits, Outgoing, Overflow
from kitt_stt.server.seats import Seats
from kitt_stt.server.session_updates import SessionUpdates
from kitt_stt.server.state import ServiceState
from kitt_stt.server.ws_transport import reset_unread

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
        self._updates = SessionUpdates(self._config, state.engine, self.session_id)
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
        self._seats = Seats(state, self.session_id, self._pid, self, lambda: self._updates.current, self.send,
                            self._admission)
        self._pacer = MessagePacer(server.max_messages_per_s)
        self._byte_pacer = TokenBucket(server.max_read_bytes_per_s, server.max_read_bytes_per_s)  # bytes, likewise
        self._bytes_paid_at = 0.0
        self._finished = asyncio.Event()
        self._closing = False  # the socket is going away: stop reading
        self._draining = False  # seats are being flushed: read and discard
        self._finishing: asyncio.Task[None] | None = None
        self._heard_at = asyncio.get_running_loop().time()  # when the client last sent anything (idle timeout)
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
        pipeline = self._seats.find(seat)
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
        idle_s = self._config.server.idle_timeout_s
        watch = asyncio.create_task(self._watch_idle(idle_s)) if idle_s else None
        try:
            await asyncio.wait([self._reader])  # a slow consumer's close or an idle-out cancels the reader
            if not self._reader.cancelled() and (failure := self._reader.exception()) is not None:
                raise failure
        finally:
            self._reader.cancel()
            if watch is not None:
                watch.cancel()
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

    async def _watch_idle(self, idle_s: float) -> None:
        """Idle out a session that sends nothing for ``idle_s`` (not while a drain owns it). One
        timer per session that wakes once per ``idle_s``, not one armed and cancelled per message:
        at 50 frames a second per seat that was a task and a timer for every frame."""
        loop = asyncio.get_running_loop()
        while not self._closing:
            left = self._heard_at + idle_s - loop.time()
            if left > 0 or self._draining:
                await asyncio.sleep(left if left > 0 else idle_s)
                continue
            await self._idle_out(idle_s)
            if self._reader is not None:
                self._reader.cancel()
            return

    async def _receive_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while not self._closing:
            # Reading slower than a flooding client sends lets TCP push back on it: its messages
            # wait in its own socket buffers instead of taking the event loop from everyone else.
            pause = max(self._pacer.delay_for(1.0), self._bytes_paid_at - time.monotonic())
            if pause > 0:
                await asyncio.sleep(pause)
            try:
                message = await self._ws.receive()
                self._heard_at = loop.time()
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
            if error.fatal:  # no seat for a connection that holds none (server.max_server_seats): go elsewhere
                await self._finish(EndReason.STOP, CLOSE_TRY_AGAIN_LATER)
                return True
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
        await self._flush_seats(self._seats, reason)
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
        self._seats.close()
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
        return sum(seat.buffered_bytes for seat in self._seats) + self._outbox.bytes

    @property
    def seat_count(self) -> int:
        return len(self._seats)

    # ----- frames ------------------------------------------------------------------------------

    def _dispatch(self, frame: ClientFrame) -> None:
        if isinstance(frame, AudioFrame):
            self._seats.on_audio(frame)
        elif isinstance(frame, VadFrame):
            self._seats.get(frame.seat).client_vad(frame.event)
        elif isinstance(frame, FinalizeFrame):
            self._on_finalize(frame)
        elif isinstance(frame, PingFrame):
            self.send(PongFrame(id=frame.id))

    async def _on_settings(self, frame: StartFrame | ConfigureFrame) -> None:
        await self._updates.apply(frame)
        if isinstance(frame, StartFrame):
            if frame.client:
                log.info("session %s: client %s", self.session_id, quoted(frame.client))
            for seat in frame.seats or []:
                self._seats.get(seat)

    def _on_finalize(self, frame: FinalizeFrame) -> None:
        found = self._seats.find(frame.seat)
        seats = list(self._seats) if frame.seat is None else [found] if found is not None else []
        for seat in seats:
            task = seat.flush(EndReason.FINALIZE)
            if task is not None:
                task.add_done_callback(partial(log_task_failure,
                                               what=f"session {self.session_id} seat {seat.seat}: finalize"))
