"""Word timings and confidence (``words: true``) through a real server on the tone model.

The tone model's truth is exact: burst ``i`` of ``tone_pcm(text, lead_ms=L)`` starts at
``L + i * (burst_ms + gap_ms)`` ms of the audio sent, so every word's start is checked against it
on the seat's clock, within one CTC frame (60 ms). Its confidence is the token's posterior: near 1
on a clean burst, lower on one masked by noise.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from kitt_stt.client.session import connect
from kitt_stt.models.tone_model import TOKENS
from kitt_stt.models.tone_synth import ToneStyle, synthesize, to_pcm16
from tests.helpers import collect_until, commits, of_type, run_server, send_pcm, silence, tone_pcm

FRAME_MS = 60
BURST_MS, GAP_MS = 200, 100


def burst_starts(count: int, lead_ms: float, offset_ms: float = 0.0, gap_ms: float = GAP_MS) -> list[float]:
    return [offset_ms + lead_ms + index * (BURST_MS + gap_ms) for index in range(count)]


def turn_over(count: int = 1):
    return lambda frames: len(commits(frames)) >= count


def masked(text: str, index: int, snr_db: float, lead_ms: float = 300.0, tail_ms: float = 800.0) -> bytes:
    """``text`` spoken cleanly but for burst ``index``, which white noise at ``snr_db`` masks."""
    audio = synthesize(text, ToneStyle(lead_ms=lead_ms, tail_ms=tail_ms))
    start = int((lead_ms + index * (BURST_MS + GAP_MS)) * 16)
    span = slice(start - 800, start + BURST_MS * 16 + 800)
    power = float(np.mean(audio[start : start + BURST_MS * 16].astype(np.float64) ** 2))
    noise = np.random.default_rng(7).normal(0.0, np.sqrt(power / 10 ** (snr_db / 10)), audio[span].shape)
    audio[span] = np.clip(audio[span] + noise, -1.0, 1.0)
    return to_pcm16(audio)


@pytest.fixture(scope="module")
def words_server(tmp_path_factory: pytest.TempPathFactory, model_cache: Path):
    overrides = {"turn": {"wait_ms": 400}, "vad": {"silence_ms": 500}, "asr": {"chunk_pause_ms": 200}}
    with run_server(tmp_path_factory.mktemp("words"), model_cache, overrides) as server:
        yield server


async def session_frames(server, pcm: bytes, turns: int = 1, **settings: Any) -> tuple[dict, list[dict]]:
    async with connect(server.url) as session:
        if settings:
            await session.start(**settings)
        await send_pcm(session, pcm, realtime_factor=4.0)
        return session.ready, await collect_until(session, turn_over(turns))


def assert_timed(words: list[dict], texts: list[str], starts: list[float]) -> None:
    assert [word["text"] for word in words] == texts
    for word, truth in zip(words, starts, strict=True):
        assert abs(word["start_ms"] - truth) <= FRAME_MS, (word, truth)
        assert word["start_ms"] < word["end_ms"]
    assert [w["start_ms"] for w in words] == sorted(w["start_ms"] for w in words)


async def test_words_off_by_default_leave_the_wire_as_it_was(words_server) -> None:
    ready, frames = await session_frames(words_server, tone_pcm("打开车门"))
    assert ready["model"]["words"] is True
    [final] = of_type(frames, "final")
    assert final["text"] == "打开车门"
    assert "words" not in final and "confidence" not in final
    assert "confidence" not in commits(frames)[0]


async def test_every_word_starts_within_one_frame_of_its_burst(words_server) -> None:
    _, frames = await session_frames(words_server, tone_pcm("打开车门"), words=True)
    [final] = of_type(frames, "final")
    assert_timed(final["words"], ["打", "开", "车", "门"], burst_starts(4, 300))
    assert all(word["confidence"] > 0.99 for word in final["words"])
    assert final["confidence"] > 0.99
    assert commits(frames)[0]["confidence"] == final["confidence"]


async def test_latin_letters_make_one_word_as_written(words_server) -> None:
    _, frames = await session_frames(words_server, tone_pcm("打开ABC"), words=True)
    [final] = of_type(frames, "final")
    starts = burst_starts(5, 300)
    assert_timed(final["words"], ["打", "开", "ABC"], [starts[0], starts[1], starts[2]])
    assert final["words"][2]["end_ms"] >= starts[4]  # ends after its last letter's frame


async def test_later_segments_and_chunks_are_on_the_seat_clock(words_server) -> None:
    """Two turns on one seat; inside each segment the 350 ms gaps close chunks
    (``asr.chunk_pause_ms``), so each word comes from a piece decoded from its own first sample."""
    first = tone_pcm("打开车", tail_ms=0, gap_ms=350)
    pcm = first + silence(3000) + tone_pcm("门窗关", lead_ms=0, gap_ms=350)
    _, frames = await session_frames(words_server, pcm, turns=2, words=True)
    finals = of_type(frames, "final")
    words = [word for final in finals for word in final["words"]]
    second_at = len(first) / 32 + 3000
    assert_timed(words, list("打开车门窗关"),
                 burst_starts(3, 300, gap_ms=350) + burst_starts(3, 0, second_at, gap_ms=350))
    assert len(finals) == 2 and all(final["timing"]["chunks"] > 1 for final in finals)
    assert [commit["confidence"] for commit in commits(frames)] == [final["confidence"] for final in finals]


async def test_length_cuts_place_each_chunk_at_its_offset(tmp_path: Path, model_cache: Path) -> None:
    """Speech without a pause long enough to cut at is cut at ``asr.max_chunk_ms`` (1 s here):
    the words of every chunk still start within one frame of their bursts."""
    text = "打开车门窗关打开车门窗关打开"
    with run_server(tmp_path, model_cache, {"asr": {"max_chunk_ms": 1000}, "turn": {"wait_ms": 400}}) as server:
        _, frames = await session_frames(server, tone_pcm(text, gap_ms=60), words=True)
    [final] = of_type(frames, "final")
    assert final["text"] == text and final["timing"]["chunks"] >= 3
    starts = burst_starts(len(text), 300, gap_ms=60)
    assert_timed(final["words"], list(text), starts)


async def test_a_masked_burst_is_heard_with_lower_confidence(words_server) -> None:
    _, frames = await session_frames(words_server, masked("打开车门", 2, snr_db=0.0), words=True)
    [final] = of_type(frames, "final")
    assert [word["text"] for word in final["words"]] == ["打", "开", "车", "门"]
    clean = [final["words"][i]["confidence"] for i in (0, 1, 3)]
    assert min(clean) > 0.99 and final["words"][2]["confidence"] < min(clean) - 0.02, final["words"]
    assert final["confidence"] < min(clean)
    assert commits(frames)[0]["confidence"] == final["confidence"]


async def test_configure_turns_words_on_from_the_next_segment(words_server) -> None:
    async with connect(words_server.url) as session:
        await send_pcm(session, tone_pcm("打开"), realtime_factor=4.0)
        await collect_until(session, turn_over())
        await session.configure(words=True)
        await send_pcm(session, tone_pcm("车门"), realtime_factor=4.0)
        frames = await collect_until(session, turn_over())
    [final] = of_type(frames, "final")
    assert [word["text"] for word in final["words"]] == ["车", "门"]
    assert final["words"][0]["start_ms"] >= len(tone_pcm("打开")) / 32  # the seat's clock went on


@pytest.mark.parametrize("value", ["yes", 1, [True]])
async def test_a_words_value_that_is_not_a_bool_is_bad_field(words_server, value: Any) -> None:
    async with connect(words_server.url) as session:
        for kind in ("start", "configure"):
            await session.send({"type": kind, "words": value})
            [error] = of_type(await collect_until(session, lambda fs: bool(of_type(fs, "error")), 5), "error")
            assert error["code"] == "bad_field" and "words" in error["message"], error
        await session.ping("still open")
        pong = await collect_until(session, lambda fs: bool(of_type(fs, "pong")), 5)
    assert of_type(pong, "pong")[0]["id"] == "still open"


async def test_wake_phrase_words_are_left_out_as_the_phrase_is(words_server) -> None:
    _, frames = await session_frames(words_server, tone_pcm("ABC打开车门"), words=True,
                                     wake={"phrases": ["ABC"], "mode": "detect"})
    [final] = of_type(frames, "final")
    assert final["text"] == "打开车门" and final["wake"] == {"phrase": "ABC", "text": "ABC"}
    assert_timed(final["words"], ["打", "开", "车", "门"], burst_starts(7, 300)[3:])
    assert final["confidence"] > 0.99


@pytest.mark.parametrize(("min_confidence", "woken"), [(0.99, False), (0.5, True)])
async def test_wake_min_confidence(words_server, min_confidence: float, woken: bool) -> None:
    """The wake phrase's "B" is masked by noise: it is still heard, with lower confidence, and
    below ``wake.min_confidence`` it does not wake (the final then keeps the phrase's words)."""
    _, frames = await session_frames(words_server, masked("ABC打开车门", 1, snr_db=0.0), words=True,
                                     wake={"phrases": ["ABC"], "mode": "detect", "min_confidence": min_confidence})
    [final] = of_type(frames, "final")
    [commit] = commits(frames)
    assert commit["metadata"]["wake"]["woken"] is woken
    if woken:
        assert final["text"] == "打开车门" and [w["text"] for w in final["words"]] == ["打", "开", "车", "门"]
        assert len(of_type(frames, "wake")) == 1
    else:
        assert final["text"] == "ABC打开车门" and final["wake"] is None
        assert [w["text"] for w in final["words"]] == ["ABC", "打", "开", "车", "门"]
        assert final["words"][0]["confidence"] < min_confidence
        assert of_type(frames, "wake") == []  # no early wake frame to take back


async def test_an_engine_that_cannot_time_words_says_so_and_sends_none(tmp_path: Path, model_cache: Path) -> None:
    """sherpa-onnx's SenseVoice gives no posteriors: ``ready.model.words`` is false and a session
    asking for words gets finals exactly as without (no invented numbers)."""
    wav = tmp_path / "say.wav"
    assert subprocess.run([sys.executable, "-m", "kitt_stt", "synth", "打开车门", str(wav)], timeout=60).returncode == 0
    with run_server(tmp_path, model_cache, {"asr": {"engine": "sherpa"}}) as server:
        ready, frames = await session_frames(server, tone_pcm("打开车门"), words=True)
        cli = await asyncio.to_thread(subprocess.run, [sys.executable, "-m", "kitt_stt", "transcribe", str(wav),
                                                       "--url", server.url, "--words"],
                                      capture_output=True, text=True, timeout=60)
    assert cli.returncode == 0 and "does not time words" in cli.stderr and "  word" not in cli.stdout, cli.stderr
    assert ready["model"]["words"] is False
    [final] = of_type(frames, "final")
    assert final["text"] == "打开车门" and "words" not in final and "confidence" not in final
    assert "confidence" not in commits(frames)[0]


def test_transcribe_words_prints_each_word_with_its_times_and_confidence(words_server, tmp_path: Path) -> None:
    wav = tmp_path / "say.wav"
    run = partial(subprocess.run, capture_output=True, text=True, timeout=60)
    assert run([sys.executable, "-m", "kitt_stt", "synth", "打开车门", str(wav)]).returncode == 0
    result = run([sys.executable, "-m", "kitt_stt", "transcribe", str(wav), "--url", words_server.url, "--words"])
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    printed = [line.split() for line in lines if line.startswith("  word")]
    assert [fields[-1] for fields in printed] == ["打", "开", "车", "门"], lines
    starts = [float(fields[1].split("-")[0]) for fields in printed]
    assert starts == sorted(starts) and all(float(fields[2]) > 0.99 for fields in printed), lines
    assert any(line.startswith("final") and "confidence=" in line for line in lines), lines
    plain = run([sys.executable, "-m", "kitt_stt", "transcribe", str(wav), "--url", words_server.url])
    assert "  word" not in plain.stdout and "confidence=" not in plain.stdout


@pytest.mark.parametrize("value", [2.0, -0.1, "0.5", True])
async def test_a_wake_min_confidence_outside_0_to_1_is_bad_field(words_server, value: Any) -> None:
    async with connect(words_server.url) as session:
        await session.start(wake={"phrases": ["ABC"], "mode": "detect", "min_confidence": value})
        [error] = of_type(await collect_until(session, lambda fs: bool(of_type(fs, "error")), 5), "error")
    assert error["code"] == "bad_field" and "min_confidence" in error["message"], error


async def test_a_refused_wake_phrase_stays_refused_when_the_turn_is_restaged(words_server) -> None:
    """A turn of two segments is run through the text stage again as one text for its commit
    ("ABC" | "打开车门" -> "ABC打开车门"): the wake phrase its first final refused must not wake it there."""
    pcm = masked("ABC", 1, snr_db=0.0, tail_ms=700) + tone_pcm("打开车门", lead_ms=0)
    _, frames = await session_frames(words_server, pcm, words=True,
                                     wake={"phrases": ["ABC"], "mode": "detect", "min_confidence": 0.99})
    finals = of_type(frames, "final")
    [commit] = commits(frames)
    assert [final["text"] for final in finals] == ["ABC", "打开车门"] and commit["segment_ids"] == [1, 2]
    assert commit["text"] == "ABC打开车门" and commit["metadata"]["wake"]["woken"] is False
    assert of_type(frames, "wake") == []


#: The tone model's twelve sounds given other scripts' tokens (same ids, same model): the real
#: engine and server then write Kana, Hangul, Thai, punctuation and SentencePiece word starts.
SCRIPT_TOKENS = {"打": "ド", "开": "ア", "关": "。", "车": "▁문을", "门": "เปิ", "窗": "ด",
                 "A": "▁open", "B": "'s", "C": "▁do", "D": "or", "E": "!", "F": "“"}


@pytest.fixture(scope="module")
def scripts_server(tmp_path_factory: pytest.TempPathFactory, tone_dir: Path):
    model = tmp_path_factory.mktemp("scripts-model")
    shutil.copy(tone_dir / "model.onnx", model / "model.onnx")
    tokens = [SCRIPT_TOKENS.get(token, token) for token in TOKENS]
    (model / "tokens.txt").write_text("".join(f"{token} {index}\n" for index, token in enumerate(tokens)))
    overrides = {"asr": {"model": str(model)}, "turn": {"wait_ms": 400}, "text": {"script": "as_is"}}
    with run_server(tmp_path_factory.mktemp("scripts"), tmp_path_factory.mktemp("cache"), overrides) as server:
        yield server


async def test_every_word_rule_through_a_real_server(scripts_server) -> None:
    """Kana and Thai one character each (a Thai vowel sign with its consonant), Hangul and Latin
    words as written, a token's leading ▁ starting a word, punctuation with the word before (at the
    start: the word after), an apostrophe inside a word: all from the engine's own tokens."""
    spoken = "F打开关车门窗ABCDE"  # “ ド ア 。 ▁문을 เปิ ด ▁open 's ▁do or !
    _, frames = await session_frames(scripts_server, tone_pcm(spoken), words=True)
    [final] = of_type(frames, "final")
    texts = [word["text"] for word in final["words"]]
    assert texts == ["“ド", "ア。", "문을", "เ", "ปิ", "ด", "open's", "door!"], texts
    assert "".join(texts) == final["text"].replace(" ", "")  # the words spell the text
    starts = burst_starts(len(spoken), 300)
    # a word starts with its first sound (the leading “ is the first burst), ends after its last
    expected = [(0, 1), (2, 3), (4, 4), (5, 5), (5, 5), (6, 6), (7, 8), (9, 11)]
    for word, (first, last) in zip(final["words"], expected, strict=True):
        assert abs(word["start_ms"] - starts[first]) <= FRAME_MS, word
        assert abs(word["end_ms"] - (starts[last] + BURST_MS)) <= FRAME_MS, word
