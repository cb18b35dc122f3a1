"""Reading a WebSocket: uvicorn paused the socket after every message it queued and resumed it
when the app took it (two epoll calls per 20 ms audio frame); ours pauses only once several small
messages wait, and still pauses for a large one, so TCP keeps pushing back on a client the
session reads slowly."""

from __future__ import annotations

import asyncio

import uvicorn
from uvicorn.server import ServerState

from kitt_stt.server.ws_transport import QUEUED_BEFORE_PAUSE, SMALL_MESSAGE_BYTES, ResettableWebSocketProtocol


class Transport:
    def __init__(self) -> None:
        self.pauses = 0

    def pause_reading(self) -> None:
        self.pauses += 1


def protocol() -> tuple[ResettableWebSocketProtocol, Transport]:
    config = uvicorn.Config(app=lambda *_: None, ws="websockets-sansio")
    config.load()
    proto = ResettableWebSocketProtocol(config, ServerState(), {}, _loop=asyncio.new_event_loop())
    transport = Transport()
    proto.transport = transport  # type: ignore[assignment]
    proto.curr_msg_data_type = "bytes"
    return proto, transport


def queue(proto: ResettableWebSocketProtocol, size: int) -> None:
    proto.frames = [bytes(size)]
    proto.send_receive_event_to_app()


def test_small_messages_queue_a_few_before_reading_pauses() -> None:
    proto, transport = protocol()
    for _ in range(QUEUED_BEFORE_PAUSE - 1):
        queue(proto, 700)  # an audio frame
    assert transport.pauses == 0 and not proto.read_paused
    queue(proto, 700)
    assert transport.pauses == 1 and proto.read_paused
    assert proto.queue.qsize() == QUEUED_BEFORE_PAUSE  # nothing was dropped


def test_a_large_message_pauses_reading_at_once() -> None:
    proto, transport = protocol()
    queue(proto, SMALL_MESSAGE_BYTES + 1)
    assert transport.pauses == 1 and proto.read_paused
