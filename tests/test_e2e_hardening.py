"""A hostile client through a real server (issue 19): input never amplified, a client that does not
read is closed (``slow_consumer``) without costing the server memory or other sessions anything,
hotword floods are budgeted and logged once, and the small HTTP fixes (API docs behind the token,
one version, HEAD on the console, auth before validation on ``/debug/tracing``)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import msgpack
import pytest
import websockets
from websockets.client import ClientProtocol
from websockets.frames import Close, Frame, Opcode
from websockets.protocol import State
from websockets.uri import parse_uri

from kitt_stt.client.session import connect
from tests.helpers import RunningServer, collect_until, run_server

REPO = Path(__file__).resolve().parents[1]
PING_ID = b"x" * 1000  # the largest ids a ping may carry come back as ~1 KB pongs


def pack(frame: dict[str, Any]) -> bytes:
    return msgpack.packb(frame, use_bin_type=True)


def metric(server: RunningServer, name: str, labels: str = "") -> float:
    text = httpx.get(f"{server.http}/metrics", timeout=5).text
    match = re.search(rf"^{re.escape(name)}{re.escape(labels)} (\S+)$", text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


async def round_trip(url: str) -> float:
    """A fresh session answers a ping: the server still serves others."""
    async with connect(url) as session:
        started = time.monotonic()
        await session.ping("still-there")
        frames = await collect_until(session, lambda got: any(f["type"] == "pong" for f in got), timeout=10)
        assert frames[-1]["id"] == "still-there"
        return time.monotonic() - started


# ----- input never amplified --------------------------------------------------------------------------


async def test_a_60_kb_hotword_is_answered_by_a_small_bad_field(server: RunningServer) -> None:
    async with websockets.connect(server.url, max_size=1 << 22) as websocket:
        await websocket.recv()  # ready
        await websocket.send(pack({"type": "configure", "hotwords": ["a:" + "x" * 60000]}))
        answer = await asyncio.wait_for(websocket.recv(), 10)
    frame = msgpack.unpackb(answer)
    assert frame["type"] == "error" and frame["code"] == "bad_field"
    assert len(answer) < 600, f"{len(answer)} bytes: client input is echoed at length"
    assert "60002 characters" in frame["message"]  # what was cut is said, not shown


async def test_unknown_types_and_long_hotwords_are_quoted_briefly(server: RunningServer) -> None:
    async with websockets.connect(server.url, max_size=1 << 22) as websocket:
        await websocket.recv()
        await websocket.send(pack({"type": "t" * 50000}))
        await websocket.send(pack({"type": "configure", "hotwords": ["y" * 60000]}))
        answers = [await asyncio.wait_for(websocket.recv(), 10) for _ in range(2)]
    assert [msgpack.unpackb(a)["code"] for a in answers] == ["bad_frame", "bad_field"]
    assert all(len(a) < 600 for a in answers), [len(a) for a in answers]


# ----- slow consumers -------------------------------------------------------------------------------


#: a 64 KiB outbox cap, the frame cap and the read pacing out of the way, a 4 s stall limit
SMALL_OUTBOX = {"server": {"max_outbox_bytes": 65536, "outbound_queue_frames": 1_000_000,
                           "max_messages_per_s": 1_000_000, "send_stall_s": 4}}


@pytest.fixture(scope="module")
def small_outbox(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """A server whose outbox cap is 64 KiB (the frame cap out of the way), read without pacing."""
    with run_server(tmp_path_factory.mktemp("outbox"), model_cache, SMALL_OUTBOX) as running:
        yield running


class RawClient:
    """A WebSocket client on a plain blocking socket that reads only when told to (the asyncio
    client libraries keep reading into their own buffers, so they cannot play a client that
    stopped reading). A small receive buffer keeps what the kernel holds for it small."""

    def __init__(self, url: str, rcvbuf: int = 8192) -> None:
        uri = parse_uri(url)
        self.protocol = ClientProtocol(uri, max_size=1 << 22)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.connect((uri.host, uri.port))
        self.sock.settimeout(5)
        self.protocol.send_request(self.protocol.connect())
        self._flush()
        while self.protocol.state is not State.OPEN:
            self.protocol.receive_data(self.sock.recv(65536))

    def _flush(self) -> None:
        for data in self.protocol.data_to_send():
            if data:
                self.sock.sendall(data)

    def flood_pings(self, count: int) -> int:
        """Send up to ``count`` pings without reading; stop when the server stops taking them."""
        sent = 0
        with contextlib.suppress(OSError):  # socket.timeout included
            for _ in range(count):
                self.protocol.send_binary(pack({"type": "ping", "id": PING_ID}))
                self._flush()
                sent += 1
        return sent

    def read_until_closed(self, timeout: float = 20.0) -> tuple[list[dict[str, Any]], Close | None]:
        """Everything the server sends until it closes, and its close frame (None: none came)."""
        frames: list[dict[str, Any]] = []
        self.sock.settimeout(1)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            if data:
                self.protocol.receive_data(data)
            else:
                self.protocol.receive_eof()
            frames += [msgpack.unpackb(event.data) for event in self.protocol.events_received()
                       if isinstance(event, Frame) and event.opcode is Opcode.BINARY]
            with contextlib.suppress(OSError):
                self._flush()  # our answer to the server's close
            if not data:
                break
        return frames, self.protocol.close_rcvd

    def close(self) -> None:
        self.sock.close()


async def test_a_client_that_does_not_read_is_closed_at_the_byte_cap(small_outbox: RunningServer) -> None:
    server = small_outbox
    async with connect(server.url) as bystander:
        flooder = await asyncio.to_thread(RawClient, server.url)
        try:
            await asyncio.to_thread(flooder.flood_pings, 20_000)  # 20 MB of pongs asked for, none read
            deadline = time.monotonic() + 15
            while metric(server, "kitt_slow_consumers_total", '{reason="bytes"}') < 1:
                assert time.monotonic() < deadline, server.log()[-3000:]
                await asyncio.sleep(0.2)
            assert metric(server, "kitt_buffered_bytes") < 65536  # the dropped queue is gone at once
            await bystander.ping(1)  # the other session is served meanwhile
            assert (await collect_until(bystander, lambda got: got and got[-1]["type"] == "pong"))[-1]["id"] == 1
            frames, close = await asyncio.to_thread(flooder.read_until_closed)  # it reads again
        finally:
            flooder.close()
        assert frames and frames[-1]["type"] == "error" and frames[-1]["code"] == "slow_consumer", frames[-3:]
        assert frames[-1]["fatal"] is True
        assert close is not None and (close.code, close.reason) == (1013, "slow_consumer")
        assert all(f["type"] in {"ready", "pong"} for f in frames[:-1])
        assert server.log().count("client does not read its frames (bytes") == 1
        assert metric(server, "kitt_errors_total", '{code="slow_consumer"}') == 1
        await round_trip(server.url)


@pytest.fixture(scope="module")
def stalling(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """A server that gives a socket 1.5 s to drain; the byte and frame caps out of the way."""
    overrides = {"server": {"max_outbox_bytes": 256 << 20, "outbound_queue_frames": 1_000_000,
                            "max_messages_per_s": 1_000_000, "send_stall_s": 1.5}}
    with run_server(tmp_path_factory.mktemp("stall"), model_cache, overrides) as running:
        yield running


async def test_a_socket_that_does_not_drain_ends_its_session(stalling: RunningServer) -> None:
    server = stalling
    async with connect(server.url) as bystander:
        gone = await asyncio.to_thread(RawClient, server.url)
        try:
            await asyncio.to_thread(gone.flood_pings, 8000)  # more than the sockets hold, far under the caps
            deadline = time.monotonic() + 20
            while metric(server, "kitt_live_sessions") > 1:  # released without the client doing anything
                assert time.monotonic() < deadline, server.log()[-3000:]
                await asyncio.sleep(0.2)
            assert metric(server, "kitt_slow_consumers_total", '{reason="stall"}') == 1
            assert metric(server, "kitt_buffered_bytes") == 0
            await bystander.ping(2)
            assert (await collect_until(bystander, lambda got: got and got[-1]["type"] == "pong"))[-1]["id"] == 2
        finally:
            gone.close()
    assert server.log().count("client does not read its frames (stall") == 1


@pytest.fixture(scope="module")
def slow_reader(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """A server that reads at most 64 KiB a second from one connection."""
    overrides = {"server": {"max_read_bytes_per_s": 65536, "max_messages_per_s": 1_000_000}}
    with run_server(tmp_path_factory.mktemp("bytes"), model_cache, overrides) as running:
        yield running


async def test_reads_are_paced_in_bytes(slow_reader: RunningServer) -> None:
    """300 pings of ~1 KB are ~300 KB: past the first second's 64 KiB, 64 KiB a second (a lower
    bound on the time, which load cannot make flaky)."""
    async with connect(slow_reader.url) as session:
        started = time.monotonic()
        for index in range(300):
            await session.ping([index, PING_ID])
        frames = await collect_until(session, lambda got: len(got) == 300, timeout=30)
        elapsed = time.monotonic() - started
    assert [f["id"][0] for f in frames] == list(range(300))  # nothing dropped, in order
    assert elapsed > 3.0, elapsed
    async with connect(slow_reader.url) as other:  # another connection has its own budget
        await other.ping("quick")
        assert (await collect_until(other, lambda got: bool(got), timeout=2))[0]["id"] == "quick"


# ----- hotwords ---------------------------------------------------------------------------------------


async def test_unknown_hotwords_are_one_warning_per_list_and_changes_are_budgeted(server: RunningServer) -> None:
    before = server.log()
    async with connect(server.url) as session:
        for index in range(6):  # the default budget: 5 changes at once
            await session.configure(hotwords=[f"zz{index}q{n}" for n in range(1000)])  # no token of the tone model
        await session.ping("done")
        frames = await collect_until(session, lambda got: got and got[-1]["type"] == "pong", timeout=30)
        errors = [f for f in frames if f["type"] == "error"]
        assert [e["code"] for e in errors] == ["rate_limited"], errors
        assert "server.hotword_changes" in errors[0]["message"]
        await session.configure(hotwords=[f"zz4q{n}" for n in range(1000)])  # the list in force: free
        await session.ping("again")
        again = await collect_until(session, lambda got: got and got[-1]["type"] == "pong", timeout=10)
        assert not [f for f in again if f["type"] == "error"]
    added = server.log()[len(before):]
    assert added.count("have no tokens in this model's vocabulary") == 5, added[-2000:]
    assert added.count("1000 of 1000 hotwords") == 5
    assert "zz0q999" not in added  # five examples per list, not the thousand


# ----- small ones -------------------------------------------------------------------------------------


async def test_an_audio_frame_without_seat_reports_the_default_seat(server: RunningServer) -> None:
    async with connect(server.url) as session:
        await session.send({"type": "audio", "pcm": "not bytes"})
        await session.send({"type": "finalize", "seat": 5})
        frames = await collect_until(session, lambda got: len(got) >= 2)
    assert [(f["code"], f["seat"]) for f in frames] == [("bad_field", "default"), ("bad_field", None)]


def test_version_is_the_package_version(server: RunningServer) -> None:
    import kitt_stt

    pyproject = re.search(r'^version = "([^"]+)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert pyproject is not None
    pyproject_version = pyproject.group(1)
    spec = httpx.get(f"{server.http}/openapi.json", timeout=5).json()
    assert kitt_stt.__version__ == pyproject_version == spec["info"]["version"]


def test_head_on_the_console(server: RunningServer) -> None:
    for path in ("/console/", "/console/settings.json", "/console/static/console.js"):
        response = httpx.head(f"{server.http}{path}", timeout=5)
        assert response.status_code == 200, (path, response.status_code)
        assert response.headers["cache-control"] == "no-cache" and not response.content


@pytest.fixture(scope="module")
def with_tokens(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    overrides = {"server": {"auth_token": "s3cret"},
                 "debug": {"trace_enabled": True, "token": "d3bug"}}
    with run_server(tmp_path_factory.mktemp("tokens"), model_cache, overrides) as running:
        yield running


def test_api_docs_need_the_token_when_one_is_required(with_tokens: RunningServer) -> None:
    base = with_tokens.http
    for path in ("/openapi.json", "/docs", "/redoc"):
        assert httpx.get(base + path, timeout=5).status_code == 401, path
        assert httpx.get(base + path, headers={"Authorization": "Bearer nope"}, timeout=5).status_code == 403
        assert httpx.get(base + path, headers={"Authorization": "Bearer s3cret"}, timeout=5).status_code == 200


def test_debug_tracing_checks_the_token_before_the_parameters(with_tokens: RunningServer) -> None:
    url = f"{with_tokens.http}/debug/tracing"
    assert httpx.post(url, timeout=5).status_code == 401
    assert httpx.post(url, headers={"Authorization": "Bearer nope"}, timeout=5).status_code == 403
    good = {"Authorization": "Bearer d3bug"}
    assert httpx.post(url, headers=good, timeout=5).status_code == 422
    assert httpx.post(url, params={"enabled": "maybe"}, headers=good, timeout=5).status_code == 422
    answer = httpx.post(url, params={"enabled": "false"}, headers=good, timeout=5)
    assert answer.status_code == 200 and answer.json() == {"enabled": False}


def test_the_kubernetes_configs_serve_no_api_docs() -> None:
    from kitt_stt.config.loader import load_config

    for name in ("config-k8s.yaml", "config-k3s-orin.yaml"):
        assert load_config(REPO / name, env={}).config.server.api_docs is False, name
