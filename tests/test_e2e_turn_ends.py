"""Every turn that starts ends on the wire (``start.turn_ends``, docs/protocol.md): through a real
server, a cough (noise with no words) and a wake phrase said alone each end in ``filtered``, so a
client that opened "user speaking" at the turn's first ``speech_start`` can close it. Sessions
that do not ask keep the old behaviour (such turns end in nothing)."""

from __future__ import annotations

import asyncio
from typing import Any

from kitt_stt.client.session import connect
from tests.helpers import cough_pcm, of_type, send_pcm, tone_pcm

WAKE = {"phrases": ["ABC"], "mode": "detect"}
ENDS = ("commit", "filtered")


def turn_ends_per_opening(frames: list[dict[str, Any]]) -> list[str]:
    """Walk the frames as a client does: a ``speech_start`` with no turn open opens one; each
    turn end must close an open turn. Returns how each opened turn ended, in order."""
    ended: list[str] = []
    open_turn = False
    for frame in frames:
        if frame["type"] == "speech_start":
            open_turn = True
        elif frame["type"] in ENDS:
            assert open_turn, f"a {frame['type']} with no turn open: {frames}"
            ended.append(frame["type"] if frame["type"] == "commit" else f"filtered:{frame['reason']}")
            open_turn = False
    assert not open_turn, f"a turn started and never ended: {frames}"
    return ended


async def talk(url: str, **start: Any) -> list[dict[str, Any]]:
    """A cough, the wake phrase alone, its command, then another cough, in real time (the 1.5 s
    pauses are five times the server's 300 ms turn wait, so each turn ends before the next starts
    even on a loaded machine)."""
    pcm = cough_pcm() + tone_pcm("ABC", tail_ms=1500) + tone_pcm("打开车门", lead_ms=0, tail_ms=1500) + cough_pcm()
    async with connect(url) as session:
        await session.start(wake=WAKE, **start)
        await send_pcm(session, pcm, realtime_factor=1.0)
        await session.close()  # the server flushes (anything still open ends now), then closes

        async def until_closed() -> list[dict[str, Any]]:
            return [frame async for frame in session.frames()]

        return await asyncio.wait_for(until_closed(), 15)


async def test_every_turn_a_speech_start_opens_ends_exactly_once(server) -> None:
    frames = await talk(server.url, turn_ends=True)
    assert turn_ends_per_opening(frames) == ["filtered:empty", "filtered:wake_only", "commit", "filtered:empty"]
    filtered = of_type(frames, "filtered")
    assert all(frame["text"] == "" and frame["segment_ids"] for frame in filtered)
    ids = [frame["turn_id"] for frame in frames if frame["type"] in ENDS]
    assert ids == sorted(set(ids))  # each end takes its own turn_id, increasing
    [commit] = of_type(frames, "commit")
    assert commit["text"] == "打开车门" and commit["metadata"]["wake"]["follow_up"] is True
    assert of_type(frames, "wake")  # the wake-only turn still announced its phrase


async def test_a_session_that_does_not_ask_gets_no_new_frames(server) -> None:
    frames = await talk(server.url)
    assert not of_type(frames, "filtered")
    assert [frame["type"] for frame in frames if frame["type"] in ENDS] == ["commit"]


async def test_turn_ends_must_be_a_bool(server) -> None:
    async with connect(server.url) as session:
        await session.start(turn_ends="yes")
        frame = await asyncio.wait_for(session.receive(), 5)
    assert frame["type"] == "error" and frame["code"] == "bad_field" and "turn_ends" in frame["message"], frame
