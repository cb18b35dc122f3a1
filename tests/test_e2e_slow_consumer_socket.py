"""A client that stops reading loses its TCP connection, not only its session (review item C8).

Closing a slow consumer used to release the session but leave the socket ESTABLISHED: asyncio's
``transport.close()`` waits for its write buffer to drain, which a client that reads nothing never
lets happen, so the server kept the fd and megabytes of kernel send queue for as long as the
client liked.  These tests look at the kernel's own table (procfs) for the server's end of the
connection, with a raw client that really stops reading (tests/test_e2e_hardening.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kitt_stt.client.session import connect
from tests.helpers import RunningServer, collect_until, run_server
from tests.test_e2e_hardening import SMALL_OUTBOX, RawClient, metric

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="reads the kernel's socket table from /proc/net")

GONE_WITHIN_S = 5.0  # after the session is released; the reset itself happens before the release
TIME_WAIT = "06"  # /proc/net/tcp's code: the kernel's small leftover of a clean close, no fd and no buffers


def server_ends(server_port: int, client_port: int) -> list[str]:
    """The server-side sockets of one connection in /proc/net/tcp{,6}, any TCP state, as
    ``state=<hex> tx_queue=<bytes>``; empty once the kernel has let the connection go."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                local, remote, state, queues = fields[1], fields[2], fields[3], fields[4]
                if int(local.rsplit(":", 1)[1], 16) == server_port and int(remote.rsplit(":", 1)[1], 16) == client_port:
                    found.append(f"state={state} tx_queue={int(queues.split(':')[0], 16)}")
    return found


def held_ends(server_port: int, client_port: int) -> list[str]:
    """``server_ends`` that still hold something: all but TIME_WAIT."""
    return [end for end in server_ends(server_port, client_port) if not end.startswith(f"state={TIME_WAIT} ")]


@pytest.fixture(scope="module")
def stalling(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """A socket gets 1.5 s to drain; the byte and frame caps are out of the way, so only the stall closes it."""
    overrides = {"server": {"max_outbox_bytes": 256 << 20, "outbound_queue_frames": 1_000_000,
                            "max_messages_per_s": 1_000_000, "send_stall_s": 1.5}}
    with run_server(tmp_path_factory.mktemp("zombie"), model_cache, overrides) as running:
        yield running


async def released(server: RunningServer, live: int) -> None:
    deadline = time.monotonic() + 30
    while metric(server, "kitt_live_sessions") > live:
        assert time.monotonic() < deadline, server.log()[-3000:]
        await asyncio.sleep(0.2)


async def test_the_socket_of_a_client_that_stopped_reading_is_dropped(stalling: RunningServer) -> None:
    server = stalling
    async with connect(server.url) as bystander:
        gone = await asyncio.to_thread(RawClient, server.url)
        try:
            client_port = gone.sock.getsockname()[1]
            assert server_ends(server.port, client_port), "the connection should be in the kernel's table"
            await asyncio.to_thread(gone.flood_pings, 8000)  # fills both sides' buffers; then it reads nothing
            await released(server, live=1)
            deadline = time.monotonic() + GONE_WITHIN_S
            while (left := server_ends(server.port, client_port)) and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
            assert not left, f"server still holds the connection {GONE_WITHIN_S:g} s after the release: {left}"
            assert re.search(r"the client left \d+ bytes unread; connection reset", server.log())
            ended = await asyncio.to_thread(reads_to_the_end, gone)
            assert ended, "the client should see its connection end, not wait forever"
            await bystander.ping(3)  # the reset touched nobody else
            assert (await collect_until(bystander, lambda got: got and got[-1]["type"] == "pong"))[-1]["id"] == 3
        finally:
            gone.close()


@pytest.fixture(scope="module")
def small_outbox(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """Closed at a 64 KiB outbox, well before the 4 s a stalled socket gets."""
    with run_server(tmp_path_factory.mktemp("reads-again"), model_cache, SMALL_OUTBOX) as running:
        yield running


async def test_a_slow_consumer_that_reads_again_gets_its_close_not_a_reset(small_outbox: RunningServer) -> None:
    server = small_outbox
    flooder = await asyncio.to_thread(RawClient, server.url)
    try:
        client_port = flooder.sock.getsockname()[1]
        await asyncio.to_thread(flooder.flood_pings, 20_000)
        deadline = time.monotonic() + 15
        while metric(server, "kitt_slow_consumers_total", '{reason="bytes"}') < 1:
            assert time.monotonic() < deadline, server.log()[-3000:]
            await asyncio.sleep(0.2)
        frames, close = await asyncio.to_thread(flooder.read_until_closed)  # it reads again, within the grace
    finally:
        flooder.close()
    assert frames and frames[-1]["code"] == "slow_consumer", frames[-3:]
    assert close is not None and (close.code, close.reason) == (1013, "slow_consumer")
    await released(server, live=0)
    assert "connection reset" not in server.log()
    deadline = time.monotonic() + GONE_WITHIN_S
    while (held := held_ends(server.port, client_port)) and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert not held, f"a clean close leaves at most TIME_WAIT behind: {held}"


def reads_to_the_end(client: RawClient, timeout_s: float = 10.0) -> bool:
    """True once the client's socket reports the end (EOF or reset) within ``timeout_s``."""
    client.sock.settimeout(0.5)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if not client.sock.recv(65536):
                return True
        except TimeoutError:
            continue
        except ConnectionResetError:
            return True
    return False
