"""The hotword-change budget through a real server: it charges what decoding uses (hotwords and wake
phrases alike: changing only ``wake.phrases`` rebuilds the trie too), and only frames that are valid.
Before, 1000 hotwords then 20 wake-only changes were 21 trie builds and no ``rate_limited``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kitt_stt.client.session import connect
from tests.engine_wrappers import UNPREPARABLE
from tests.helpers import RunningServer, collect_until, run_server

BURST = 3
TRIE_BUILT = "have no tokens in this model's vocabulary"  # one warning per list built (the zz words)
UNKNOWN_WORDS = [f"zz{n}q" for n in range(1000)]  # no token of the tone model


@pytest.fixture(scope="module")
def stingy(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """A server whose budget does not refill within a test (one change per 100 s after the burst)."""
    overrides = {"server": {"hotword_changes": {"burst": BURST, "per_s": 0.01}}}
    with run_server(tmp_path_factory.mktemp("budget"), model_cache, overrides) as running:
        yield running


async def errors_after(session: Any, ping: str) -> list[dict[str, Any]]:
    """The error frames the server sent before answering ``ping`` (frames are handled in order)."""
    await session.ping(ping)
    got = await collect_until(session, lambda got: bool(got) and got[-1]["type"] == "pong", timeout=60)
    return [f for f in got if f["type"] == "error"]


def wake(phrase: str) -> dict[str, Any]:
    return {"mode": "detect", "phrases": [phrase]}


async def test_changing_only_the_wake_phrases_spends_the_hotword_budget(stingy: RunningServer) -> None:
    before = stingy.log()
    async with connect(stingy.url) as session:
        await session.configure(hotwords=UNKNOWN_WORDS)  # 1
        for phrase in ("hello kitt", "hey kitt", "hi kitt"):  # 2, 3, then over budget
            await session.configure(wake=wake(phrase))
        errors = await errors_after(session, "budget")
        assert [e["code"] for e in errors] == ["rate_limited"], errors
        assert "server.hotword_changes" in errors[0]["message"]
        await session.configure(wake=wake("hey kitt"))  # the decode list in force: free
        assert await errors_after(session, "in force") == []
    assert stingy.log()[len(before):].count(TRIE_BUILT) == BURST  # one build per charged change, no more


async def test_an_invalid_frame_costs_no_budget(stingy: RunningServer) -> None:
    async with connect(stingy.url) as session:
        for index in range(BURST + 2):
            await session.configure(hotwords=[f"w{index}", "12:30"])  # boost 30 is out of range
            await session.configure(hotwords=[f"v{index}"], wake={"mode": "detect", "phrases": []})  # no phrase
        errors = await errors_after(session, "invalid")
        assert [e["code"] for e in errors] == ["bad_field"] * (2 * (BURST + 2)), errors
        for index in range(BURST):  # the whole budget is still there
            await session.configure(hotwords=[f"u{index}"])
        assert await errors_after(session, "valid") == []


async def test_a_frame_whose_hotwords_fail_to_prepare_costs_no_budget(tmp_path: Path, model_cache: Path) -> None:
    """``bad_field`` from preparing the list: the frame is not applied, so it costs nothing (the
    token used to be taken before preparing: the third such frame was ``rate_limited``)."""
    overrides = {"server": {"hotword_changes": {"burst": 2, "per_s": 0.01}}}
    with run_server(tmp_path, model_cache, overrides, module="tests.failing_hotwords_server") as server:
        async with connect(server.url) as session:
            for _ in range(3):
                await session.configure(hotwords=["fine", UNPREPARABLE])
            errors = await errors_after(session, "unpreparable")
            assert [e["code"] for e in errors] == ["bad_field"] * 3, errors
            assert all("could not be prepared" in e["message"] for e in errors), errors
            for words in (["fine"], ["good"]):  # the whole budget is still there
                await session.configure(hotwords=words)
            assert await errors_after(session, "valid") == []
