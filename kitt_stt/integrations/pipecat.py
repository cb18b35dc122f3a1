"""A pipecat STT service backed by a kitt-stt server: ``KittSTTService`` (extra ``kitt-stt[pipecat]``).

The server decides when the user's turn ends (its end-of-turn model), so the pipeline needs
no local VAD or Smart Turn: ``speech_start`` proposes the user's turn start, ``commit`` pushes
a finalized ``TranscriptionFrame`` and proposes its stop, and the service recommends pipecat's
external turn strategies (eager ones with ``eager=True``) for the user aggregator to resolve
those proposals, as pipecat's own server-side-turn services do. Mapping, reconnect and keepalive
rules: docs/integrations.md, kitt_stt/integrations/link.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Sequence
from typing import Any

import numpy as np
from loguru import logger
from pipecat.audio.utils import create_stream_resampler
from pipecat.frames.frames import (
    CancelFrame,
    EndFrame,
    ErrorFrame,
    Frame,
    InputAudioRawFrame,
    InterimTranscriptionFrame,
    ProposedUserStartedSpeakingFrame,
    ProposedUserStoppedSpeakingFrame,
    StartFrame,
    STTMetadataFrame,
    TranscriptionFrame,
    VADUserStoppedSpeakingFrame,
)
from pipecat.processors.frame_processor import FrameDirection
from pipecat.services.settings import STTSettings
from pipecat.services.stt_service import WebsocketSTTService
from pipecat.transcriptions.language import Language
from pipecat.turns.eager_end_of_turn_mixin import EagerEndOfTurnSTTServiceMixin
from pipecat.turns.user_stop.external_user_turn_stop_strategy import ExternalUserTurnStopStrategy
from pipecat.utils.errors import ErrorCategory
from pipecat.utils.time import time_now_iso8601
from websockets.protocol import State

from kitt_stt.integrations.link import SAMPLE_RATE, LinkOptions, Reframer, ReplayBuffer, decode, encode
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

_READY_TIMEOUT_S = 10.0
_CATEGORIES = {"bad_frame": ErrorCategory.INVALID_REQUEST, "bad_field": ErrorCategory.INVALID_REQUEST,
               "bad_audio": ErrorCategory.INVALID_REQUEST, "too_many_seats": ErrorCategory.INVALID_REQUEST,
               "rate_limited": ErrorCategory.RATE_LIMIT, "overloaded": ErrorCategory.SERVER,
               "internal": ErrorCategory.SERVER, "idle_timeout": ErrorCategory.CONNECTIVITY}


def _language(code: str | None) -> Language | None:
    try:
        return Language(code) if code else None
    except ValueError:
        return None


class KittSTTService(EagerEndOfTurnSTTServiceMixin, WebsocketSTTService):
    """Stream the pipeline's audio to one seat of a kitt-stt server; the server's turns drive the pipeline.

    Event handlers, besides pipecat's ``on_connected`` / ``on_disconnected`` /
    ``on_connection_error``: ``on_commit(service, frame)`` with the server's ``commit`` frame
    (its ``metadata.eot.decision`` says why the turn ended).
    """

    _websocket: Any  # pipecat's WebsocketService slot: the open connection, or None

    def __init__(self, url: str, *, seat: str = "driver", language: str | None = None,
                 hotwords: Sequence[str] = (), token: str | None = None, eager: bool = True,
                 interim: bool = True, should_interrupt: bool = True, finalize_on_vad_stop: bool = True,
                 keepalive_s: float = 10.0, replay_max_ms: int = 30_000,
                 reconnect_backoff_min_wait: float = 0.5, reconnect_backoff_max_wait: float = 8.0,
                 start_options: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """``url``: the server's WebSocket endpoint (``ws://host:8000/stt/sensevoice``); ``token``: its
        ``server.auth_token``; ``eager``: answer ``turn_eager`` ahead of the commit (pipecat's eager
        turn strategies) and withdraw on ``turn_resumed``; ``finalize_on_vad_stop``: when the pipeline
        runs its own VAD, commit the turn at its stop (``finalize``) instead of waiting for the
        server's decision; ``start_options``: further ``start`` fields (``wake``, ``text``)."""
        self._options = LinkOptions(url=url, seat=seat, language=language, hotwords=tuple(hotwords), token=token,
                                    eager=eager, interim=interim, client="pipecat", keepalive_s=keepalive_s,
                                    replay_max_ms=replay_max_ms, extra_start=dict(start_options or {}))
        kwargs.setdefault("settings", STTSettings(model=None, language=None))  # ours are in the start frame
        super().__init__(enable_eager_end_of_turn=eager, keepalive_timeout=keepalive_s,
                         keepalive_interval=min(1.0, keepalive_s),
                         reconnect_backoff_min_wait=reconnect_backoff_min_wait,
                         reconnect_backoff_max_wait=reconnect_backoff_max_wait, **kwargs)
        self._should_interrupt = should_interrupt
        self._finalize_on_vad_stop = finalize_on_vad_stop
        self._replay = ReplayBuffer(replay_max_ms, self._options.idle_keep_ms)
        self._tracker = TurnTracker(seat, self._replay)
        self._reframer = Reframer()
        self._resampler = create_stream_resampler()
        self._channels = 1
        self._receive_task: asyncio.Task | None = None
        self._cancelled = False  # a CancelFrame came: tear down at once, without the server's flush
        self.ready: dict[str, Any] | None = None  # the server's last ``ready`` frame
        self._register_event_handler("on_commit")

    @property
    def supports_ttfs(self) -> bool:
        """The server defines the turn's end; there is no separate speech-end-to-final delay."""
        return False

    def can_generate_metrics(self) -> bool:
        return True

    def service_metadata_frame(self) -> STTMetadataFrame:
        """pipecat's external turn strategies, told not to wait for a transcript after our stop:
        the server's commit pushes its transcript before the stop, and a turn that ends in
        ``filtered`` (a cough, a passenger, the wake phrase alone) has none, so waiting would keep
        the user "speaking" until pipecat's 5 s stop timeout, with the bot unable to answer."""
        frame = super().service_metadata_frame()
        strategies = self.recommended_user_turn_strategies(enable_interruptions=self._should_interrupt)
        for strategy in strategies.stop or []:
            if isinstance(strategy, ExternalUserTurnStopStrategy):
                strategy.wait_for_transcript = False
        frame.user_turn_strategies = strategies
        return frame

    async def start(self, frame: StartFrame) -> None:
        await super().start(frame)
        await self._connect()

    async def stop(self, frame: EndFrame) -> None:
        await super().stop(frame)
        await self._disconnect()

    async def cancel(self, frame: CancelFrame) -> None:
        """pipecat expects a cancel to stop at once: no flush, no wait for the server's last
        commit, and no closing handshake (a stalled server would hold it for ``close_timeout``).
        pipecat's own ``cancel`` calls ``_disconnect``, which then drops the connection."""
        self._cancelled = True
        await super().cancel(frame)

    async def process_audio_frame(self, frame: InputAudioRawFrame, direction: FrameDirection) -> None:
        self._channels = max(1, frame.num_channels)
        await super().process_audio_frame(frame, direction)

    async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
        await super().process_frame(frame, direction)
        if isinstance(frame, VADUserStoppedSpeakingFrame) and self._finalize_on_vad_stop:
            await self.finalize()

    async def finalize(self) -> None:
        """Commit the seat's turn now (``finalize``): the server ends the open segment and commits."""
        await self._send_frames(self._reframer.flush())
        self.request_finalize()
        await self._send({"type": "finalize", "seat": self._options.seat})

    async def run_stt(self, audio: bytes) -> AsyncGenerator[Frame | None, None]:
        """Send the audio as 20 ms frames of 16 kHz mono; results arrive on the receive task."""
        await self._send_frames(self._reframer.push(await self._to_16k_mono(audio)))
        yield None

    async def _to_16k_mono(self, audio: bytes) -> bytes:
        if self._channels > 1:
            samples = np.frombuffer(audio, "<i2").reshape(-1, self._channels).mean(axis=1)
            audio = samples.astype("<i2").tobytes()
        if self.sample_rate and self.sample_rate != SAMPLE_RATE:
            audio = await self._resampler.resample(audio, self.sample_rate, SAMPLE_RATE)
        return audio

    async def _send_frames(self, frames: list[bytes]) -> None:
        """Keep each frame for a replay, then send it if the socket is up; if not (down, or a
        reconnect still replaying), the replay keeps everything from now on and sends it."""
        for pcm in frames:
            self._replay.add(pcm)
            if not await self._send({"type": "audio", "seat": self._options.seat, "pcm": pcm}):
                self._replay.offline = True

    async def _send(self, frame: dict[str, Any]) -> bool:
        """Whether the frame went out (False: no open socket, or the send failed)."""
        websocket = self._websocket
        if websocket is None or websocket.state is not State.OPEN:
            return False
        try:
            await websocket.send(encode(frame))
        except Exception as exc:  # the receive loop sees the drop and reconnects
            logger.debug(f"{self}: send failed ({exc}); the receive loop reconnects")
            return False
        return True

    async def _send_keepalive(self, silence: bytes) -> None:
        """Quiet pipeline (no audio for ``keepalive_s``): a ``ping`` keeps the session open."""
        await self._send({"type": "ping", "id": "keepalive"})

    async def _try_reconnect(self, max_retries: int = 3, report_error: Any = None) -> bool:
        """pipecat's reconnect loop and backoff, with our attempt budget (a restarting server needs
        longer than pipecat's default three tries to load its model)."""
        return await super()._try_reconnect(max_retries=max(max_retries, self._options.max_reconnects),
                                            report_error=report_error)

    async def _connect(self) -> None:
        await super()._connect()
        self._cancelled = False
        await self._connect_websocket()
        if self._receive_task is None:
            self._receive_task = self.create_task(self._receive_task_handler(self._report_error))

    async def _disconnect(self) -> None:
        """Ask the server to flush the seat (``close``: its pending turn is committed) and wait
        briefly for it to close, then tear down; after a cancel, drop the connection now instead
        (the server treats that as the client gone)."""
        await super()._disconnect()
        if self._cancelled:
            await self._drop()
            return
        await self._send_frames(self._reframer.flush())
        await self._send({"type": "close"})
        if self._receive_task is not None:
            with contextlib.suppress(Exception):  # a timeout or the loop's own error: tear down anyway
                await asyncio.wait_for(asyncio.shield(self._receive_task), timeout=3.0)
            await self.cancel_task(self._receive_task, timeout=1.0)
            self._receive_task = None
        await self._disconnect_websocket()

    async def _drop(self) -> None:
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task, timeout=1.0)
            self._receive_task = None
        websocket, self._websocket = self._websocket, None
        if websocket is not None:
            websocket.transport.abort()
            await self._call_event_handler("on_disconnected")

    async def _connect_websocket(self) -> None:
        """Open the session: wait for ``ready``, send ``start``, replay the audio kept since the
        last commit, and only then publish the socket, so that live audio cannot cut into the
        replay (it is kept meanwhile and goes out as the replay's last round)."""
        if self._websocket is not None and self._websocket.state is State.OPEN:
            return
        try:
            websocket = await self._websocket_connect(self._options.url, additional_headers=self._options.headers(),
                                                      max_size=1 << 22, ping_interval=None)
            ready = decode(await asyncio.wait_for(websocket.recv(), _READY_TIMEOUT_S))
            if ready.get("type") != "ready":
                await websocket.close()
                raise ConnectionError(f"kitt-stt refused the session: {ready.get('code')}: {ready.get('message')}")
            self.ready = ready
            self._replay.limit_to(int(ready.get("limits", {}).get("burst_ms", 10_000)))
            await websocket.send(encode(self._options.start_frame()))
            if len(self._replay):
                self._tracker.reconnected()
                logger.info(f"{self}: replaying {len(self._replay) * 20} ms of audio since the last commit")
            frames, position = self._replay.since(self._replay.oldest)
            while frames:
                for pcm in frames:
                    await websocket.send(encode({"type": "audio", "seat": self._options.seat, "pcm": pcm}))
                frames, position = self._replay.since(position)
            self._websocket = websocket  # no await since the last round: no live frame slipped in between
            self._replay.offline = False
            await self._call_event_handler("on_connected")
        except Exception as exc:
            self._websocket = None
            await self._call_event_handler("on_connection_error", f"{exc}")
            logger.warning(f"{self}: cannot connect to {self._options.url}: {exc}")

    async def _disconnect_websocket(self) -> None:
        websocket, self._websocket = self._websocket, None
        if websocket is not None:
            try:
                await websocket.close()
            except Exception as exc:
                logger.debug(f"{self}: closing the websocket: {exc}")
            await self._call_event_handler("on_disconnected")

    async def _receive_messages(self) -> None:
        websocket = self._websocket
        if websocket is None:
            raise ConnectionError(f"{self}: not connected")
        async for message in websocket:
            for event in self._tracker.on_frame(decode(message)):
                await self._on_turn_event(event)

    async def _on_turn_event(self, event: TurnEvent) -> None:
        if isinstance(event, TurnStarted):
            await self.broadcast_frame(ProposedUserStartedSpeakingFrame)
        elif isinstance(event, Partial):
            await self.push_frame(InterimTranscriptionFrame(event.text, self._user_id, time_now_iso8601(),
                                                            _language(self._options.language)))
        elif isinstance(event, Eager):
            await self._push_eager_end_of_turn(event.text, user_id=self._user_id,
                                               language=_language(self._options.language))
        elif isinstance(event, Resumed):
            await self._cancel_eager_end_of_turn()
        elif isinstance(event, Committed):
            await self._committed(event)
        elif isinstance(event, Filtered):
            self._clear_eager_end_of_turn()
            await self.broadcast_frame(ProposedUserStoppedSpeakingFrame)
        elif isinstance(event, ServerError):
            await self.push_error_frame(ErrorFrame(f"kitt-stt {event.code}: {event.message}",
                                                   category=_CATEGORIES.get(event.code, ErrorCategory.UNKNOWN)))

    async def _committed(self, event: Committed) -> None:
        self._clear_eager_end_of_turn()
        if event.reason == "finalize":
            self.confirm_finalize()
        await self.emit_stt_usage_metrics()
        await self.push_frame(TranscriptionFrame(event.text, self._user_id, time_now_iso8601(),
                                                 _language(event.language or self._options.language),
                                                 result=event.frame, finalized=True))
        await self.broadcast_frame(ProposedUserStoppedSpeakingFrame)
        await self._call_event_handler("on_commit", event.frame)
