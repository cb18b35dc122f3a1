"""The console shows words (protocol 0.4): a WAV streamed with "word timings" on gets each word of
its final shaded by confidence and drawn on the turn's timeline; unsure words are underlined.
Same real Chromium, server and page fixtures as ``tests/test_console_browser.py``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgpack
from playwright.sync_api import Page

from tests.test_console_browser import (  # noqa: F401  (fixtures)
    TOKEN,
    browser,
    console_server,
    final_frame,
    first_turn,
    page,
    receive,
    status_is,
    wav_of,
)

TEXT = "关车窗"


def test_words_of_a_streamed_file_are_shown_with_confidence_and_on_the_timeline(page: Page, tmp_path: Path) -> None:  # noqa: F811
    sent: list[dict[str, Any]] = []
    page.on("websocket", lambda socket: socket.on(
        "framesent", lambda payload: sent.append(msgpack.unpackb(payload)) if isinstance(payload, bytes) else None))
    page.fill("#token", TOKEN)
    page.fill("#seat", "passenger")
    page.check("#words")
    page.set_input_files("#file", str(wav_of(tmp_path / "words.wav", TEXT, lead_ms=300, tail_ms=300)))
    page.click("#file-start")
    turn = first_turn(page, "passenger")
    assert turn["finals"] == [TEXT] and turn["commit"] == TEXT
    [start] = [frame for frame in sent if frame["type"] == "start"]
    assert start["words"] is True
    final = '.seat[data-seat="passenger"] .turn[data-turn="1"] .segment.final'
    words = page.locator(f"{final} .text .word")
    assert words.all_inner_texts() == list(TEXT)
    for index in range(words.count()):
        title = words.nth(index).get_attribute("title") or ""
        assert " s · confidence 0.99" in title, title
        assert float(words.nth(index).get_attribute("data-confidence") or 0) > 0.99
    assert page.locator(f"{final} .text .word.unsure").count() == 0
    assert "confidence 0.996" in page.inner_text(f"{final} .detail")
    assert "times words" in page.inner_text("#ready")
    assert "confidence 0.996" in page.inner_text('.seat[data-seat="passenger"] .turn[data-turn="1"] .commit')
    strips = page.locator('.seat[data-seat="passenger"] .turn[data-turn="1"] svg.timeline rect.word')
    assert strips.count() == len(TEXT)  # one per word, on the segment's row
    xs = [float(strips.nth(index).get_attribute("x") or 0) for index in range(strips.count())]
    assert xs == sorted(xs) and len(set(xs)) == len(xs)


def test_an_unsure_word_is_underlined_and_latin_words_keep_their_spaces(page: Page) -> None:  # noqa: F811
    page.fill("#token", TOKEN)
    page.click("#connect")
    status_is(page, "connected")
    receive(page, {"type": "speech_start", "seat": "driver", "segment_id": 1, "audio_ms": 0})
    receive(page, {**final_frame(1, "打开车门open <b>it</b>"), "confidence": 0.81, "words": [
        {"text": "打", "start_ms": 0, "end_ms": 60, "confidence": 0.99},
        {"text": "开", "start_ms": 60, "end_ms": 120, "confidence": 0.42},
        {"text": "车", "start_ms": 120, "end_ms": 180, "confidence": 0.98},
        {"text": "门", "start_ms": 180, "end_ms": 240, "confidence": 0.97},
        {"text": "open", "start_ms": 300, "end_ms": 420, "confidence": 0.95},
        {"text": "<b>it</b>", "start_ms": 420, "end_ms": 480, "confidence": 0.9}]})
    text = '.seat[data-seat="driver"] .segment.final .text'
    assert page.locator(f"{text} .word.unsure").all_inner_texts() == ["开"]
    assert [page.locator(f"{text} .word").nth(i).get_attribute("data-level") for i in range(3)] == ["9", "4", "9"]
    # markup shown as text; a space between Latin words, none next to Han (the joining rule)
    assert page.inner_text(text) == "打开车门open <b>it</b>"
    assert page.locator(f"{text} b").count() == 0


def test_a_final_the_text_stage_rewrote_keeps_its_text_and_shows_the_words_beside_it(page: Page) -> None:  # noqa: F811
    """Review finding: the words replaced the final's text, so after ITN the page showed
    "二十六度" where the final said "26度"."""
    page.fill("#token", TOKEN)
    page.click("#connect")
    status_is(page, "connected")
    receive(page, {"type": "speech_start", "seat": "driver", "segment_id": 1, "audio_ms": 0})
    receive(page, {**final_frame(1, "调到26度"), "confidence": 0.9, "words": [
        {"text": char, "start_ms": index * 60, "end_ms": index * 60 + 60, "confidence": 0.9}
        for index, char in enumerate("调到二十六度")]})
    text = '.seat[data-seat="driver"] .segment.final .text'
    assert page.inner_text(text).startswith("调到26度")
    assert page.locator(f"{text} .words.as-recognised .word").all_inner_texts() == list("调到二十六度")
