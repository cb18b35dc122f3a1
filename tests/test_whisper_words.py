"""Word times and confidence on Whisper (asr/whisper_timing.py): the DTW and its filters on small
arrays, and the real whisper-base on our own onnxruntime engine, alone and through a seat."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from kitt_stt.asr.engine import AsrRequest, DecodeOptions
from kitt_stt.asr.factory import build_engine
from kitt_stt.asr.ort_whisper import OrtWhisperEngine
from kitt_stt.asr.text import outside_annotations
from kitt_stt.asr.whisper_timing import dtw, median_filter, speech_bounds_ms, whisper_words
from kitt_stt.asr.words import is_single_character_word
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.config.schema import AppConfig
from kitt_stt.pipeline.settings import SessionSettings
from tests.helpers import of_type, stream_through_seat

SPEECH = Path(__file__).parent / "fixtures" / "speech"


def test_dtw_follows_the_cheap_cells() -> None:
    cost = np.ones((3, 6))
    cost[0, :2] = cost[1, 2:4] = cost[2, 4:] = 0.0  # row 0 owns frames 0-1, row 1 frames 2-3, row 2 the rest
    rows, frames = dtw(cost)
    assert rows.tolist() == [0, 0, 1, 1, 2, 2] and frames.tolist() == [0, 1, 2, 3, 4, 5]
    rows, frames = dtw(np.zeros((1, 4)))  # one row: it takes every frame
    assert rows.tolist() == [0, 0, 0, 0] and frames.tolist() == [0, 1, 2, 3]


def test_median_filter_mirrors_the_edges() -> None:
    x = np.array([[5.0, 1.0, 9.0, 2.0, 7.0, 3.0, 8.0, 4.0]])
    padded = np.concatenate([x[0, 3:0:-1], x[0], x[0, -2:-5:-1]])  # reflect: the edge itself not repeated
    expected = [np.median(padded[i : i + 7]) for i in range(8)]
    assert median_filter(x).tolist() == [expected]
    assert median_filter(np.ones((1, 2))).shape == (1, 2)  # shorter than the half-width: unchanged


def test_words_join_split_characters_and_leave_annotations_out() -> None:
    """大 is two byte-level tokens; ' [Music]' is what strip_annotations takes out of the text."""
    pieces = [b" [", b"Music", b"]", "大".encode()[:2], "大".encode()[2:], "門".encode()]
    rows = len(pieces) + 1
    scores = np.full((2, rows, 40), -10.0)
    for row, frame in enumerate([0, 4, 8, 12, 20, 24, 30]):  # each row attends to its own frames
        scores[:, row, frame : frame + 4] = 10.0
    words = whisper_words(pieces, [0.9, 0.9, 0.9, 0.8, 0.5, 0.7], scores, 40, speech_ms=(0, 800))
    assert [word.text for word in words] == ["大", "門"]
    big, door = words
    assert big.start_ms < big.end_ms <= door.start_ms < door.end_ms <= 800
    assert big.confidence == 0.5 and door.confidence == 0.7  # the weakest of a character's tokens


def test_a_byte_no_character_can_hold_drops_only_itself() -> None:
    """Review finding: an invalid byte token left every later token pending, so the words after it
    were lost while the text (which drops the byte) kept them."""
    pieces = [b" go", b"\x80", b" forward", b" ten", b" meters"]
    rows = len(pieces) + 1
    scores = np.full((2, rows, 60), -10.0)
    for row in range(rows):
        scores[:, row, row * 10 : row * 10 + 4] = 10.0
    words = whisper_words(pieces, [0.9] * len(pieces), scores, 60, speech_ms=(0, 1200))
    assert [word.text for word in words] == ["go", "forward", "ten", "meters"]


def test_an_annotation_of_several_words_leaves_none_of_them_in_the_words() -> None:
    """Review finding: "(door closes)" left "closes)" among the words while the text dropped it."""
    pieces = [b" (", b"door", b" closes", b")", b" open", b" it"]
    rows = len(pieces) + 1
    scores = np.full((2, rows, 70), -10.0)
    for row in range(rows):
        scores[:, row, row * 10 : row * 10 + 4] = 10.0
    words = whisper_words(pieces, [0.9] * len(pieces), scores, 70, speech_ms=(0, 1400))
    assert [word.text for word in words] == ["open", "it"]
    assert outside_annotations(["[MUSIC", "go", "forward"]) == [False, True, True]  # never closed, as the text


def test_speech_bounds() -> None:
    samples = np.zeros(16000, dtype=np.int16)
    samples[4000:12000] = 3000
    assert speech_bounds_ms(samples) == (250, 750)
    assert speech_bounds_ms(np.zeros(100, dtype=np.int16)) == (0, 6)


@pytest.fixture(scope="module")
def engine(whisper_dir: Path) -> OrtWhisperEngine:
    built = build_engine(AppConfig.model_validate({"asr": {"model": str(whisper_dir), "engine": "ort"}}))
    assert isinstance(built, OrtWhisperEngine)
    return built


@pytest.mark.parametrize(("clip", "language"), [("en_go_forward_ten_meters", "en"), ("zh_da_kai_che_men", "zh")])
def test_whisper_words_cover_the_text_in_order(engine: OrtWhisperEngine, clip: str, language: str) -> None:
    samples = read_wav_16k_mono(SPEECH / f"{clip}.wav")
    assert engine.info.words
    [plain] = engine.decode_batch([AsrRequest(samples, DecodeOptions(language=language))])
    [timed] = engine.decode_batch([AsrRequest(samples, DecodeOptions(language=language, words=True))])
    assert timed.text == plain.text and not plain.words  # words cost nothing unless asked, and change no text
    words = timed.words
    assert "".join(word.text for word in words) == timed.text.replace(" ", "")
    onset, offset = speech_bounds_ms(samples)
    assert onset <= words[0].start_ms and words[-1].end_ms <= offset
    for before, after in itertools.pairwise(words):
        assert before.start_ms < before.end_ms <= after.start_ms
    assert all(0.0 < word.confidence <= 1.0 for word in words)
    if language == "zh":
        assert all(len(word.text) == 1 and is_single_character_word(word.text) for word in words)
    else:
        assert [word.text for word in words] == timed.text.split()


@pytest.mark.timeout(120)
async def test_a_final_on_whisper_carries_words_and_confidence(engine: OrtWhisperEngine, whisper_dir: Path) -> None:
    config = AppConfig.model_validate({"asr": {"model": str(whisper_dir), "engine": "ort", "words": True},
                                       "turn": {"model": None, "wait_ms": 300}, "interim": {"enabled": False}})
    pcm = read_wav_16k_mono(SPEECH / "en_go_forward_ten_meters.wav").tobytes() + bytes(32 * 1000)
    frames = await stream_through_seat(engine, config, SessionSettings(language="en", words=True), pcm,
                                       wait_ms=300, timeout=60)
    [final] = of_type(frames, "final")
    assert "forward" in final["text"].lower() and final["words"] and final["confidence"] is not None
    assert [word["start_ms"] for word in final["words"]] == sorted(word["start_ms"] for word in final["words"])
