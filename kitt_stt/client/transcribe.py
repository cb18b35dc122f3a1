"""Stream a WAV file to the service and print what comes back (``kitt-stt transcribe``)."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from kitt_stt.client.session import SttSession, connect
from kitt_stt.integrations.link import send_after_s

FRAME_MS = 20
FRAME_SAMPLES = 16000 * FRAME_MS // 1000


def format_word(word: dict[str, Any]) -> str:
    """One word of a final: its times on the seat's clock (seconds) and its confidence."""
    return (f"  word   {word['start_ms'] / 1000:8.2f}-{word['end_ms'] / 1000:<8.2f} "
            f"{word['confidence']:.3f}  {word['text']}")


def _confidence(frame: dict[str, Any]) -> str:
    return f", confidence={frame['confidence']:.3f}" if "confidence" in frame else ""


def format_frame(frame: dict[str, Any]) -> str | None:
    kind = frame.get("type")
    seat = frame.get("seat", "")
    if kind == "interim":
        return f"interim  [{seat}] #{frame['segment_id']} {frame['text']}"
    if kind == "final":
        line = (f"final    [{seat}] #{frame['segment_id']} {frame['text']}  "
                f"(lang={frame.get('lang')}, {frame.get('server_latency_ms', 0):.0f} ms{_confidence(frame)})")
        return "\n".join([line, *(format_word(word) for word in frame.get("words") or [])])
    if kind == "commit":
        decision = frame.get("metadata", {}).get("eot", {}).get("decision", {})
        return (f"commit   [{seat}] turn {frame['turn_id']} {frame['text']}  "
                f"(reason={decision.get('reason')}{_confidence(frame)})")
    if kind == "error":
        return f"error    [{seat or '-'}] {frame['code']}: {frame['message']}"
    return None


async def _send_paced(session: SttSession, samples: np.ndarray, seat: str, realtime: bool) -> None:
    """Send 20 ms frames on absolute deadlines: real time, or as fast as the server's limits allow."""
    limits = session.ready.get("limits", {})
    started = time.monotonic()
    for index, offset in enumerate(range(0, samples.shape[0], FRAME_SAMPLES)):
        frame = samples[offset : offset + FRAME_SAMPLES]
        if frame.shape[0] < FRAME_SAMPLES:
            frame = np.concatenate([frame, np.zeros(FRAME_SAMPLES - frame.shape[0], dtype=np.int16)])
        deadline = started + (index * FRAME_MS / 1000.0 if realtime else send_after_s(index, limits))
        delay = deadline - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        await session.send_audio(frame.astype("<i2").tobytes(), seat=seat)


async def transcribe(url: str, samples: np.ndarray, seat: str = "default", realtime: bool = False,
                     token: str | None = None, language: str | None = None,
                     on_frame: Callable[[dict[str, Any]], None] | None = None,
                     words: bool = False, on_notice: Callable[[str], None] | None = None) -> list[dict[str, Any]]:
    """Stream ``samples`` (int16, 16 kHz) on one seat, then ``close``; return every frame received.
    ``words``: ask for word timings and confidence (finals then carry ``words``); ``on_notice`` is
    told when the server's engine cannot time words, so an empty answer is not a mystery."""
    received: list[dict[str, Any]] = []
    async with connect(url, token=token) as session:
        if words and on_notice is not None and not session.ready.get("model", {}).get("words", False):
            on_notice("this server's engine does not time words (ready.model.words is false): finals carry "
                      "neither words nor confidence (docs/models.md)")
        settings: dict[str, Any] = {"language": language} if language else {}
        if words:
            settings["words"] = True
        if settings:
            await session.start(**settings)

        async def collect() -> None:
            async for frame in session.frames():
                received.append(frame)
                if on_frame is not None:
                    on_frame(frame)

        collector = asyncio.create_task(collect())
        await _send_paced(session, samples, seat, realtime)
        await session.close()
        await collector
    return received


def printer(stream: TextIO = sys.stdout, errors: TextIO = sys.stderr) -> Callable[[dict[str, Any]], None]:
    def show(frame: dict[str, Any]) -> None:
        line = format_frame(frame)
        if line is not None:
            print(line, file=errors if frame.get("type") == "error" else stream, flush=True)

    return show
