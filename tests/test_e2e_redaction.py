"""Secrets stay out of a real server's logs however the client spells the parameter's name: the
server decodes the query before it reads ``token``, so the redactor must too (issue 19)."""

from __future__ import annotations

import asyncio
import base64
import os
import socket

import httpx
import pytest
import websockets

from kitt_stt.client.session import connect
from kitt_stt.observability.redact import REDACTED, redact, redact_target
from tests.helpers import run_server

TOKEN = "t0ken-5ec7e7"


@pytest.mark.parametrize(("line", "expected"), [
    ("/stt?%74oken=abc&seat=1", f"/stt?%74oken={REDACTED}&seat=1"),
    ("/stt?TOKEN=abc", f"/stt?TOKEN={REDACTED}"),
    ("/stt?a=1&%61ccess%5Ftoken=abc", f"/stt?a=1&%61ccess%5Ftoken={REDACTED}"),
    ("/stt?%2574oken=abc", f"/stt?%2574oken={REDACTED}"),  # encoded twice
    ("/stt?token=a;b", f"/stt?token={REDACTED}"),  # Starlette splits on & only: the ";b" is the token's
    ("/stt?tokens=abc&token", "/stt?tokens=abc&token"),  # other names, and a name without a value, stay
    ("are you sure? token=abc", "are you sure? token=abc"),  # not a query string: text as it was
    ('GET /stt?x"&token=abc HTTP/1.1', f'GET /stt?x"&token={REDACTED} HTTP/1.1'),  # a quote does not end it
    ("GET /stt?a#&token=abc HTTP/1.1", f"GET /stt?a#&token={REDACTED} HTTP/1.1"),  # nor does a fragment
    ("/a?b=c?token=abc&d=1", f"/a?b=c?token={REDACTED}&d=1"),  # a "?" from the decoded path ahead of the query
])
def test_redact_reads_names_as_the_server_does(line: str, expected: str) -> None:
    assert redact(line) == expected


@pytest.mark.parametrize(("target", "expected"), [
    ('/stt?x"&token=abc', f'/stt?x"&token={REDACTED}'),
    ("/stt?a#&token=abc", f"/stt?a#&token={REDACTED}"),
    ("/a b?c d&token=abc", f"/a b?c d&token={REDACTED}"),  # whitespace (a decoded path) does not end it either
    ("/stt?seat=1", "/stt?seat=1"),
])
def test_a_request_target_is_query_from_its_first_question_mark_to_its_end(target: str, expected: str) -> None:
    assert redact_target(target) == expected


def raw_upgrade(port: int, target: str) -> bytes:
    """The status line a WebSocket upgrade for ``target`` gets, sent byte for byte as written (a
    client library would quote the quote)."""
    key = base64.b64encode(os.urandom(16)).decode()
    request = (f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        sock.sendall(request.encode())
        return sock.recv(200).split(b"\r\n")[0]


async def test_a_quote_or_fragment_before_the_token_does_not_let_it_into_the_log(tmp_path, model_cache) -> None:
    """h11 accepts ``"`` and ``#`` in a target, and Starlette still reads the token after them."""
    with run_server(tmp_path, model_cache, {"server": {"auth_token": TOKEN}}) as server:
        for target in (f'/stt/sensevoice?x"&token={TOKEN}', f"/stt/sensevoice?a#&token={TOKEN}"):
            assert raw_upgrade(server.port, target) == b"HTTP/1.1 101 Switching Protocols"  # accepted
        await asyncio.sleep(0.5)  # the access lines are written
        log = server.log()
    assert f'WebSocket /stt/sensevoice?x"&token={REDACTED}' in log, log
    assert f"WebSocket /stt/sensevoice?a#&token={REDACTED}" in log, log
    assert TOKEN not in log


async def test_encoded_and_cased_token_names_are_redacted_in_the_access_log(tmp_path, model_cache) -> None:
    with run_server(tmp_path, model_cache, {"server": {"auth_token": TOKEN}}) as server:
        async with connect(f"{server.url}?%74oken={TOKEN}"):  # Starlette decodes the name: accepted
            pass
        with pytest.raises(websockets.InvalidStatus):  # `TOKEN` is not the server's parameter: refused
            async with connect(f"{server.url}?TOKEN=upper-{TOKEN}"):
                pass
        assert httpx.get(f"{server.http}/readyz?To%6Ben=http-{TOKEN}").status_code == 200
        assert httpx.get(f"{server.http}/readyz?x=1&access%5Ftoken=second-{TOKEN}").status_code == 200
        await asyncio.sleep(0.3)  # the access lines are written
        log = server.log()
    assert f"WebSocket /stt/sensevoice?%74oken={REDACTED}" in log, log
    assert f"/readyz?To%6Ben={REDACTED}" in log and f"/readyz?x=1&access%5Ftoken={REDACTED}" in log, log
    assert TOKEN not in log and "Logging error" not in log
