"""Secrets stay out of a real server's logs however the client spells the parameter's name: the
server decodes the query before it reads ``token``, so the redactor must too (issue 19)."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import socket
from urllib.parse import quote, quote_plus

import httpx
import pytest
import websockets

from kitt_stt.client.session import connect
from kitt_stt.observability.redact import REDACTED, redact, redact_target
from tests.helpers import run_server

TOKEN = "t0ken-5ec7e7"


def spellings(secret: str) -> set[str]:
    """Every way a log line could carry ``secret``: raw, percent-encoded as a URL library would (either
    hex case) or character by character, and form-encoded. Which of these a server's access log
    writes is the server library's choice; none of them may appear."""
    every_char = "".join(f"%{byte:02X}" for byte in secret.encode())
    encoded = {secret, quote(secret, safe=""), quote_plus(secret), every_char}
    return encoded | {value.lower() for value in encoded if "%" in value}


def leaks(log: str, secret: str) -> list[str]:
    return sorted(spelling for spelling in spellings(secret) if spelling in log)


def access_lines(log: str, path: str) -> list[str]:
    """The access log's lines for requests to ``path`` (however the library quotes the rest)."""
    return [line for line in log.splitlines() if re.search(rf"\b(GET|WebSocket) {re.escape(path)}\?", line)]


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
    """h11 accepts ``"`` and ``#`` in a target, and Starlette still reads the token after them. How the
    access log then writes the quote (raw or ``%22``) is uvicorn's business; what must hold is that each
    connection has its access line, with the token redacted, and the token appears in no spelling."""
    with run_server(tmp_path, model_cache, {"server": {"auth_token": TOKEN}}) as server:
        targets = (f'/stt/sensevoice?x"&token={TOKEN}', f"/stt/sensevoice?a#&token={TOKEN}")
        for target in targets:
            assert raw_upgrade(server.port, target) == b"HTTP/1.1 101 Switching Protocols"  # accepted
        await asyncio.sleep(0.5)  # the access lines are written
        log = server.log()
    lines = access_lines(log, "/stt/sensevoice")
    assert len(lines) == len(targets), log
    assert all(f"token={REDACTED}" in line for line in lines), lines
    assert leaks(log, TOKEN) == [], log


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
    websocket_lines, readyz_lines = access_lines(log, "/stt/sensevoice"), access_lines(log, "/readyz")
    assert len(websocket_lines) >= 1 and len(readyz_lines) == 2, log
    assert all(REDACTED in line for line in websocket_lines + readyz_lines), log
    assert leaks(log, TOKEN) == [] and "Logging error" not in log


def test_a_leak_is_found_in_any_spelling() -> None:
    """The check above would pass on a log that spells the token another way if spellings() missed one."""
    secret = 'a"b c/d'
    for written in ('a"b c/d', "a%22b%20c%2Fd", "a%22b%20c%2fd", "a%22b+c%2Fd", "%61%22%62%20%63%2F%64"):
        assert leaks(f"GET /x?token={written} 200", secret), written
    assert leaks(f"GET /x?token={REDACTED} 200", secret) == []
