"""Secrets stay out of a real server's logs however the client spells the parameter's name: the
server decodes the query before it reads ``token``, so the redactor must too (issue 19)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import websockets

from kitt_stt.client.session import connect
from kitt_stt.observability.redact import REDACTED, redact
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
])
def test_redact_reads_names_as_the_server_does(line: str, expected: str) -> None:
    assert redact(line) == expected


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
