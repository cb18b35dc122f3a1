"""Word timings at the engine: tokens -> words rules, CTC runs and posteriors, the tone model's truth."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from kitt_stt.asr.ctc import CtcResult, HotwordTrie, beam_search, greedy
from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, DecodeOptions, EngineInfo, StageTimer
from kitt_stt.asr.language import TurnLanguage
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.asr.token_timing import timed_tokens, token_posteriors, token_runs
from kitt_stt.asr.words import TimedToken, TimedWord, overall_confidence, words_from_tokens
from kitt_stt.config.schema import AppConfig, AsrConfig
from kitt_stt.hotwords import parse_hotwords
from kitt_stt.models.tone_synth import ToneStyle, synthesize
from kitt_stt.pipeline.final_words import final_words, holds_wake
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.protocol.frames import StartFrame
from kitt_stt.server.session_updates import SessionUpdates
from kitt_stt.text import TextSettings, TextStage, WakeSettings
from kitt_stt.text import load as load_text_stage
from tests.engine_wrappers import WrappedEngine
from tests.helpers import of_type, stream_through_seat, tone_pcm

FRAME_MS = 60


def tokens(*texts: str) -> list[TimedToken]:
    """Tokens 100 ms apart, each 60 ms long, confidence 0.9."""
    return [TimedToken(text, 100 * index, 100 * index + 60, 0.9) for index, text in enumerate(texts)]


def spelled(words: list[TimedWord]) -> list[str]:
    return [word.text for word in words]


@pytest.mark.parametrize(("pieces", "expected"), [
    (["打开", "车", "门"], ["打", "开", "车", "门"]),  # Han: one character each, even inside one token
    ([" open", " the", " do", "or"], ["open", "the", "door"]),  # Latin: as written, ▁ starts a word
    (["打开", " GPS", "导航"], ["打", "开", "GPS", "导", "航"]),
    (["车门", "。", " Open", " it", "!"], ["车", "门。", "Open", "it!"]),  # punctuation to the word before
    (["“", "打", "开", "”"], ["“打", "开”"]),  # at the very start: to the word after
    (["。", "！"], ["。！"]),  # only punctuation: one word, so the words still cover the text
    ([" 문을", " 열어", " 줘"], ["문을", "열어", "줘"]),  # Hangul as written
    (["ドア", "を"], ["ド", "ア", "を"]),  # Kana: one each
    (["เปิด"], ["เ", "ปิ", "ด"]),  # Thai: one character each, a combining vowel with its consonant
    ([" don", "'", "t", " go"], ["don't", "go"]),  # an apostrophe inside a word keeps it
    (["A", "B", "C", "打"], ["ABC", "打"]),  # the tone model's Latin letters, written without spaces
])
def test_words_follow_the_rules(pieces: list[str], expected: list[str]) -> None:
    assert spelled(words_from_tokens(tokens(*pieces))) == expected


def test_leading_punctuation_times_and_scores_the_word_it_opens() -> None:
    [word] = words_from_tokens([TimedToken("“", 0, 60, 0.5), TimedToken("打", 300, 360, 0.99)])
    assert (word.text, word.start_ms, word.end_ms, word.confidence) == ("“打", 0, 360, 0.5)


def test_a_word_spans_its_tokens_and_is_as_sure_as_its_weakest() -> None:
    heard = [TimedToken(" do", 0, 60, 0.95), TimedToken("or", 120, 180, 0.6), TimedToken(" now", 300, 360, 0.99)]
    door, now = words_from_tokens(heard)
    assert (door.start_ms, door.end_ms, door.confidence) == (0, 180, 0.6)
    assert (now.start_ms, now.end_ms, now.confidence) == (300, 360, 0.99)
    assert overall_confidence([door, now]) == pytest.approx(np.sqrt(0.6 * 0.99), abs=1e-4)
    assert overall_confidence([]) is None


def logits_with(path: list[int], vocab: int = 5, peak: float = 8.0) -> np.ndarray:
    """Logits whose argmax follows ``path`` (0 is blank)."""
    rows = np.zeros((len(path), vocab), dtype=np.float32)
    rows[np.arange(len(path)), path] = peak
    return rows


def test_a_token_run_lasts_while_it_beats_blank_and_stops_at_the_next_token() -> None:
    path = [0, 2, 2, 2, 0, 0, 3, 0, 3, 3, 0]
    logits = logits_with(path)
    decoded = greedy(logits, len(path))
    assert decoded.token_ids == [2, 3, 3] and decoded.frames == [1, 6, 8]
    assert token_runs(logits, len(path), decoded) == [(1, 3), (6, 6), (8, 9)]


def test_posterior_is_the_softmax_of_the_token_where_it_was_emitted() -> None:
    logits = np.log(np.array([[0.7, 0.2, 0.1], [0.1, 0.6, 0.3], [0.2, 0.7, 0.1]], dtype=np.float32))
    decoded = CtcResult([1], [1])
    assert token_runs(logits, 3, decoded) == [(1, 2)]
    assert token_posteriors(logits, decoded) == pytest.approx([0.6], abs=1e-6)


def test_prefix_frames_are_skipped_and_frames_become_milliseconds() -> None:
    path = [1, 1, 1, 1, 0, 2, 0, 0, 3, 3]  # four prefix "tags" (all token 1 here, each its own frame)
    logits = logits_with(path)
    decoded = CtcResult([1, 1, 1, 1, 2, 3], [0, 1, 2, 3, 5, 8])
    timed = timed_tokens(logits, len(path), decoded, ["<a>", "<b>", "<c>", "<d>", "x", "y"], 4, FRAME_MS)
    assert [(t.text, t.start_ms, t.end_ms) for t in timed] == [("x", 60, 120), ("y", 240, 360)]


@pytest.fixture(scope="module")
def engines(tone_dir: Path) -> dict[str, OrtSenseVoiceEngine]:
    model = load_sense_voice_model(tone_dir)
    return {method: OrtSenseVoiceEngine(model, "tone", AsrConfig.model_validate({"decoding": {"method": method}}))
            for method in ("greedy", "beam")}


def pcm(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)


@pytest.mark.parametrize("method", ["greedy", "beam"])
@pytest.mark.parametrize(("burst_ms", "gap_ms", "lead_ms"),
                         [(200, 100, 300), (80, 60, 170), (300, 250, 1030), (1000, 100, 290), (120, 60, 230)])
def test_tone_words_start_and_end_within_one_frame_of_their_bursts(engines, method: str, burst_ms: float, gap_ms: float,
                                                           lead_ms: float) -> None:
    text = "打开关车门窗"
    audio = synthesize(text, ToneStyle(burst_ms=burst_ms, gap_ms=gap_ms, lead_ms=lead_ms, tail_ms=300))
    result = engines[method].decode_batch([AsrRequest(pcm(audio), DecodeOptions(words=True))])[0]
    assert result.text == text
    starts = [lead_ms + index * (burst_ms + gap_ms) for index in range(len(text))]
    assert [word.text for word in result.words] == list(text)
    start_errors = [word.start_ms - start for word, start in zip(result.words, starts, strict=True)]
    end_errors = [word.end_ms - (start + burst_ms) for word, start in zip(result.words, starts, strict=True)]
    assert max(abs(error) for error in start_errors + end_errors) <= FRAME_MS, (start_errors, end_errors)
    assert min(word.confidence for word in result.words) > 0.99  # so is their geometric mean, the final's


def test_hotword_beam_search_times_the_word_it_chose(engines) -> None:
    audio = synthesize("打开车门", ToneStyle(lead_ms=300, tail_ms=300))
    options = DecodeOptions(words=True, hotwords=tuple(parse_hotwords(["车门:2"])))
    result = engines["greedy"].decode_batch([AsrRequest(pcm(audio), options)])[0]  # hotwords: beam search
    assert [word.start_ms for word in result.words] == [300, 600, 900, 1200]


def test_a_masked_burst_scores_lower_than_clean_ones(engines) -> None:
    audio = synthesize("打开车门", ToneStyle(lead_ms=300, tail_ms=300))
    start = 900 * 16
    span = slice(start - 800, start + 200 * 16 + 800)
    power = float(np.mean(audio[start : start + 3200].astype(np.float64) ** 2))
    audio[span] += np.random.default_rng(3).normal(0, np.sqrt(power), audio[span].shape).astype(np.float32)  # 0 dB
    result = engines["greedy"].decode_batch([AsrRequest(pcm(audio), DecodeOptions(words=True))])[0]
    confidences = [word.confidence for word in result.words]
    assert result.text == "打开车门"
    assert confidences[2] < min(confidences[0], confidences[1], confidences[3]) - 0.02, confidences


def test_nothing_is_computed_when_words_are_not_asked(engines, monkeypatch: pytest.MonkeyPatch) -> None:
    def never(*_args: object) -> None:
        raise AssertionError("word timings computed for a decode that did not ask for them")

    monkeypatch.setattr("kitt_stt.asr.ort_sense_voice.timed_tokens", never)
    audio = synthesize("打开", ToneStyle(lead_ms=300, tail_ms=300))
    result = engines["greedy"].decode_batch([AsrRequest(pcm(audio), DecodeOptions())])[0]
    assert result.text == "打开" and result.words == ()


def test_beam_search_and_greedy_give_the_same_runs_on_a_clear_path() -> None:
    path = [0, 2, 2, 0, 3, 0, 0, 4, 4, 4, 0]
    logits = logits_with(path)
    greedy_result = greedy(logits, len(path))
    beam_result = beam_search(logits, len(path), 4, HotwordTrie([]))
    assert beam_result.token_ids == greedy_result.token_ids and beam_result.frames == greedy_result.frames
    assert token_runs(logits, len(path), beam_result) == [(1, 2), (4, 4), (7, 9)]


def test_the_wake_phrases_words_are_counted_before_itn_rewrites_the_command() -> None:
    """Review finding: the wake's words were counted as what the sent text lacks, so when ITN
    shortened the command ("twenty" -> "20") command words were dropped as the wake's, and in
    Mandarin every sent word took its neighbour's time."""
    load_text_stage()
    english = TextStage(TextSettings(), WakeSettings(phrases=("hey kitt",), mode="detect"))
    raw = "hey kitt set the temperature to twenty degrees"
    staged = english.final(raw, "en")
    assert staged.text == "set the temperature to 20 degrees"
    words = [TimedWord(word, index * 300, index * 300 + 200, 0.9 if index > 1 else 0.4)
             for index, word in enumerate(raw.split())]
    placed = final_words(words, staged)
    assert [word.text for word in placed.words] == ["set", "the", "temperature", "to", "twenty", "degrees"]
    assert placed.wake_confidence == 0.4  # the wake's own words, not "set the"

    mandarin = TextStage(TextSettings(), WakeSettings(phrases=("你好小明",), mode="detect"))
    raw = "你好小明调到二十六度"
    staged = mandarin.final(raw, "zh")
    assert staged.text == "调到26度"
    words = [TimedWord(char, index * 100, index * 100 + 80, 0.9) for index, char in enumerate(raw)]
    sent = final_words(words, staged).words
    assert [(word.text, word.start_ms) for word in sent[:2]] == [("调", 400), ("到", 500)]

    # ITN that keeps the count but moves characters ("一百度三十六度" -> "100度36度", 7 and 7): the
    # words must not take the sent text's characters one for one ("度" would become "0")
    raw = "你好小明温度一百度三十六度"
    staged = mandarin.final(raw, "zh")
    assert staged.text == "温度100度36度" and staged.itn_changed
    words = [TimedWord(char, index * 100, index * 100 + 80, 0.9) for index, char in enumerate(raw)]
    assert [word.text for word in final_words(words, staged).words] == list("温度一百度三十六度")


class RecordingWords(WrappedEngine):
    """The tone engine, noting for each decode whether it asked for word timings, by priority."""

    def __init__(self, inner: AsrEngine) -> None:
        super().__init__(inner)
        self.asked: list[bool] = []

    def decode_batch(self, requests: Sequence[AsrRequest], timer: StageTimer | None = None) -> list[AsrResult]:
        self.asked += [request.options.words for request in requests]
        return self.inner.decode_batch(requests, timer)


@pytest.mark.timeout(60)
async def test_interims_of_a_words_session_do_not_time_words(engines) -> None:
    """Only the final's pieces carry words: an interim's text is replaced, so timing its words (a
    softmax over the vocabulary per token) is work nobody reads."""
    engine = RecordingWords(engines["greedy"])
    config = AppConfig.model_validate({"asr": {"chunk_pause_ms": 0}, "turn": {"model": None},
                                       "interim": {"enabled": True, "start_ms": 600, "min_interval_ms": 600}})
    settings = SessionSettings(interim=True, words=True)
    frames = await stream_through_seat(engine, config, settings, tone_pcm("打开车门关窗", tail_ms=600), realtime=True)
    [final] = of_type(frames, "final")
    assert of_type(frames, "interim") and final["words"], frames
    assert engine.asked.count(True) == 1 and engine.asked.count(False) == len(engine.asked) - 1, engine.asked


@pytest.mark.parametrize("engine_times_words", [True, False])
async def test_a_session_has_words_only_where_the_engine_times_them(engine_times_words: bool) -> None:
    """Decided once, where settings are made: on an engine without word timings (Whisper) a
    ``words: true`` session decodes without them, so nothing waits for words that cannot come (a
    wake phrase in an interim with ``wake.min_confidence`` was held for the final there)."""
    class Engine:
        info = EngineInfo(name="e", kind="tone", provider="cpu", languages=("auto", "zh"), words=engine_times_words)

    config = AppConfig.model_validate({"asr": {"words": True}, "wake": {"min_confidence": 0.5}})
    updates = SessionUpdates(config, Engine(), "s")  # type: ignore[arg-type]
    assert updates.current.words is engine_times_words
    await updates.apply(StartFrame(type="start", words=True))
    options = updates.current.decode_options(TurnLanguage(), lambda: np.zeros(0, dtype=np.int16))
    assert options.words is engine_times_words
    assert holds_wake(options, updates.current.stage) is engine_times_words
