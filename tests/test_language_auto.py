"""``language: auto`` stays within the allowed languages (asr.auto_languages or the session's
``languages``), decided once per segment and kept for a turn (issue 20)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from kitt_stt.asr.engine import AsrRequest, DecodeOptions
from kitt_stt.asr.language import LanguageGuess, SegmentLanguage, TurnLanguage, restricted_guess
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.asr.sherpa_sense_voice import SherpaSenseVoiceEngine
from kitt_stt.asr.sherpa_whisper import SherpaWhisperEngine
from kitt_stt.asr.whisper_language import WhisperLanguageDetector
from kitt_stt.asr.whisper_model import load_whisper_model
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.client.session import connect
from kitt_stt.config.loader import load_config
from kitt_stt.config.schema import AsrConfig
from kitt_stt.pipeline.settings import SessionSettings
from kitt_stt.server.session_updates import SessionUpdates
from tests.helpers import collect_until, of_type, run_server, send_pcm, silence, tone_pcm

SPEECH = Path(__file__).parent / "fixtures" / "speech"


def test_restricted_guess_masks_languages_outside_the_set() -> None:
    tokens = {"en": 0, "zh": 1, "th": 2}
    logits = np.array([1.0, 0.0, 9.0])  # Thai by far, as whisper-base reads our Mandarin fixtures
    guess = restricted_guess(logits, tokens, ["zh", "en"])
    assert guess.lang == "en" and guess.probability == pytest.approx(1 / (1 + np.exp(-1.0)), abs=1e-3)
    assert restricted_guess(logits, tokens, ["zh"]) == LanguageGuess("zh", 1.0)


def test_a_turn_keeps_its_language_unless_later_evidence_is_clearly_stronger() -> None:
    turn = TurnLanguage()
    calls: list[int] = []

    def detector(lang: str, probability: float):
        return lambda audio: calls.append(audio.shape[0]) or LanguageGuess(lang, probability)

    def piece(samples: int) -> np.ndarray:
        return np.zeros(samples, dtype=np.int16)

    first = turn.segment(switch_margin=0.25, min_samples=100)
    assert first.resolve(piece(200), detector("zh", 0.7)).lang == "zh"
    assert first.resolve(piece(200), detector("en", 0.99)).lang == "zh"  # decided: the segment's other pieces reuse it
    assert calls == [200]
    assert turn.segment(0.25, 100).resolve(piece(200), detector("en", 0.8)).lang == "zh"  # not clearly stronger
    assert turn.segment(0.25, 100).resolve(piece(200), detector("en", 0.96)).lang == "en"  # 0.96 >= 0.7 + 0.25
    short = turn.segment(0.25, 100)
    assert short.resolve(piece(50), detector("zh", 0.9)).lang == "en"  # too short to decide: the turn's language
    assert calls == [200, 200, 200] and short.guess == LanguageGuess("en", 0.96)
    fresh = TurnLanguage()
    early = fresh.segment(0.25, 100)
    assert early.resolve(piece(50), detector("en", 0.7)).lang == "en" and fresh.guess == LanguageGuess("en", 0.7)
    assert fresh.segment(0.25, 100).resolve(piece(200), detector("zh", 0.75)).lang == "en"  # the short first counts
    calls.clear()
    alone = SegmentLanguage(min_samples=100)
    assert alone.resolve(piece(50), detector("zh", 0.6)).lang == "zh" and alone.guess is not None
    assert alone.resolve(piece(60), detector("en", 0.9)).lang == "zh"  # the early guess holds until 100 samples
    assert alone.resolve(piece(150), detector("en", 0.9)).lang == "en"  # then the segment decides once
    assert calls == [50, 150]


def test_a_segments_decision_replaces_its_own_early_guess() -> None:
    """A 300 ms chunk made the turn's first guess (zh, 0.7); the segment's decision on more of the same
    speech (en, 0.8) must win without the switch margin, or the shortest audio decides the turn."""
    turn = TurnLanguage()
    so_far = {"audio": np.zeros(50, dtype=np.int16)}
    segment = turn.segment(0.25, 100, audio=lambda: so_far["audio"])
    assert segment.resolve(so_far["audio"], lambda _a: LanguageGuess("zh", 0.7)).lang == "zh"
    assert turn.guess == LanguageGuess("zh", 0.7)
    so_far["audio"] = np.zeros(150, dtype=np.int16)
    assert segment.resolve(so_far["audio"], lambda _a: LanguageGuess("en", 0.8)).lang == "en"
    assert turn.guess == LanguageGuess("en", 0.8)
    # a later segment's evidence against the decided language still needs the margin
    later = turn.segment(0.25, 100, audio=lambda: so_far["audio"])
    assert later.resolve(so_far["audio"], lambda _a: LanguageGuess("zh", 0.9)).lang == "en"
    # and a segment that inherited the turn's language (no early guess of its own) cannot drop it
    inherited = TurnLanguage()
    inherited.settle(LanguageGuess("en", 0.6))
    short = {"audio": np.zeros(50, dtype=np.int16)}
    segment = inherited.segment(0.25, 100, audio=lambda: short["audio"])
    assert segment.resolve(short["audio"], lambda _a: LanguageGuess("zh", 0.99)).lang == "en"
    short["audio"] = np.zeros(150, dtype=np.int16)
    assert segment.resolve(short["audio"], lambda _a: LanguageGuess("zh", 0.7)).lang == "en"


def test_a_segment_detects_on_its_audio_so_far_not_on_a_short_piece() -> None:
    """Chunks can be 300 ms; the segment's first 1 s says more than any one of them."""
    so_far = np.zeros(120, dtype=np.int16)
    seen: list[int] = []
    segment = TurnLanguage().segment(min_samples=100, audio=lambda: so_far)
    guess = segment.resolve(np.zeros(30, dtype=np.int16), lambda audio: seen.append(audio.shape[0]) or
                            LanguageGuess("en", 0.9))
    assert guess.lang == "en" and seen == [120]


async def _final(url: str, pcm: bytes, **settings: object) -> dict:
    async with connect(url) as session:
        await session.start(**settings)
        await send_pcm(session, pcm)
        await send_pcm(session, silence(1000))
        frames = await collect_until(session, lambda got: bool(of_type(got, "commit")), timeout=60)
    assert not of_type(frames, "error"), frames
    finals = of_type(frames, "final")
    assert finals, frames
    return finals[-1]


async def test_session_languages_restrict_detection(server) -> None:
    """The tone model's language query always says zh; a session allowing only en gets en."""
    pcm = tone_pcm("打开车门", tail_ms=300)
    default = await _final(server.url, pcm)
    assert default["lang"] == "zh" and 0.5 < default["lang_probability"] <= 1.0
    english = await _final(server.url, pcm, languages=["en"])
    assert english["lang"] == "en" and english["lang_probability"] == 1.0
    explicit = await _final(server.url, pcm, language="zh", languages=["en"])
    assert explicit["lang"] == "zh" and explicit["lang_probability"] is None  # named, not detected


def test_auto_languages_outside_the_servers_languages_are_left_out(tmp_path: Path, model_cache: Path) -> None:
    """A server allowing [auto, en, ja] keeps loading with the default auto_languages [zh, en]: auto means en."""
    async def scenario(url: str) -> None:
        final = await _final(url, tone_pcm("打开车门", tail_ms=300))
        assert final["lang"] == "en", final

    with run_server(tmp_path, model_cache, {"asr": {"languages": ["auto", "en", "ja"]}}) as server:
        asyncio.run(scenario(server.url))


def test_sherpa_sense_voice_detects_within_the_set_then_passes_the_language(tmp_path: Path, model_cache: Path) -> None:
    """sherpa-onnx hides the language query's scores: our onnxruntime engine detects, sherpa decodes."""
    async def scenario(url: str) -> None:
        pcm = tone_pcm("打开车门", tail_ms=300)
        english = await _final(url, pcm, languages=["en"])
        assert english["lang"] == "en" and english["lang_probability"] == 1.0, english
        default = await _final(url, pcm)
        assert default["lang"] == "zh" and english["text"] == default["text"], default

    with run_server(tmp_path, model_cache, {"asr": {"engine": "sherpa"}}) as server:
        asyncio.run(scenario(server.url))


@pytest.mark.parametrize("languages", [[], ["xx"], ["auto"], ["en", "en"], "en", [1], ["fr"]])
async def test_invalid_language_sets_are_bad_field(server, languages: object) -> None:
    async with connect(server.url) as session:
        await session.send({"type": "configure", "languages": languages})
        frames = await collect_until(session, lambda got: bool(of_type(got, "error")), timeout=10)
        error = of_type(frames, "error")[0]
        assert error["code"] == "bad_field" and "languages" in error["message"], error
        await session.send({"type": "configure", "languages": ["zh"]})  # the session goes on
        await session.send({"type": "ping", "id": 7})
        pong = await collect_until(session, lambda got: bool(of_type(got, "pong")), timeout=10)
        assert not of_type(pong, "error"), pong


@pytest.mark.timeout(300)
def test_whisper_auto_detects_english_and_mandarin_within_the_set(tmp_path: Path, model_cache: Path,
                                                                  whisper_dir: Path) -> None:
    """whisper-base alone reads these speakers as Thai; restricted to zh/en each comes back in its language."""
    overrides = {"asr": {"model": "whisper-base"}, "interim": {"enabled": False}}

    async def scenario(url: str, url_http: str) -> None:
        english = read_wav_16k_mono(SPEECH / "en_open_the_car_door_please.wav").tobytes()
        mandarin = read_wav_16k_mono(SPEECH / "zh_da_kai_che_men.wav").tobytes()
        final = await _final(url, english, language="auto")
        assert final["lang"] == "en" and "please" in final["text"].lower(), final  # "card or": whisper-base
        final = await _final(url, mandarin, language="auto")
        assert final["lang"] == "zh" and "车门" in final["text"], final
        restricted = await _final(url, mandarin, language="auto", languages=["en"])
        assert restricted["lang"] == "en" and restricted["lang_probability"] == 1.0, restricted
        # an upload detects within asr.auto_languages too (it asked for all 99 and read this as Thai)
        reply = await asyncio.to_thread(httpx.post, f"{url_http}/v1/audio/transcriptions", timeout=120,
                                        files={"file": ("zh.wav", (SPEECH / "zh_da_kai_che_men.wav").read_bytes())},
                                        data={"language": "auto", "response_format": "verbose_json"})
        assert reply.status_code == 200 and reply.json()["language"] == "zh", reply.text

    with run_server(tmp_path, model_cache, overrides) as server:
        asyncio.run(scenario(server.url, server.http))


def test_a_turn_language_outside_a_narrowed_set_is_not_reused() -> None:
    """A configure that narrows ``languages`` mid-turn: the next segment detects within the new set."""
    turn = TurnLanguage()
    wide = SessionSettings(languages=("zh", "en")).decode_options(turn).segment_language
    assert wide is not None
    assert wide.resolve(np.zeros(200, dtype=np.int16), lambda _a: LanguageGuess("en", 0.9)).lang == "en"
    narrow = SessionSettings(languages=("zh", "ja"))
    short = narrow.decode_options(turn).segment_language
    assert short is not None
    assert short.resolve(np.zeros(50, dtype=np.int16), lambda _a: LanguageGuess("ja", 0.6)).lang == "ja"
    long = TurnLanguage()
    long.settle(LanguageGuess("en", 0.9))
    segment = long.segment(0.25, 100, allowed=("zh", "ja"))
    assert segment.resolve(np.zeros(200, dtype=np.int16), lambda _a: LanguageGuess("zh", 0.5)).lang == "zh"
    assert long.guess == LanguageGuess("zh", 0.5)  # the turn follows: en is no longer allowed


def _tone_samples(text: str) -> np.ndarray:
    return np.frombuffer(tone_pcm(text, tail_ms=300), dtype="<i2").copy()


def test_ort_sense_voice_decides_on_an_unforced_language_query(model_cache: Path) -> None:
    """The tone model's frame 0 copies a forced language: forcing the early guess (the turn's en) made
    the 1 s decision repeat it, so a turn could never switch. Before the decision the query runs free."""
    engine = OrtSenseVoiceEngine(load_sense_voice_model(model_cache / "tone", prefer_int8=True), "sense_voice",
                                 AsrConfig())
    audio = _tone_samples("打开车门打开车门")
    assert audio.shape[0] >= 16000
    turn = TurnLanguage()
    turn.settle(LanguageGuess("en", 0.3))
    so_far = {"audio": audio[:8000]}
    segment = turn.segment(0.25, 16000, audio=lambda: so_far["audio"])
    options = DecodeOptions(language="auto", languages=("zh", "en"), segment_language=segment)
    early = engine.decode_batch([AsrRequest(so_far["audio"], options)])[0]
    assert early.lang == "en" and segment.decided is None  # the turn's language, masked; nothing decided
    so_far["audio"] = audio
    deciding = engine.decode_batch([AsrRequest(audio[8000:], options)])[0]
    assert deciding.lang == "zh" and segment.decided is not None and segment.decided.lang == "zh", deciding
    assert turn.guess is not None and turn.guess.lang == "zh"


def test_sherpa_sense_voice_builds_its_detector_only_when_auto_has_a_choice(model_cache: Path) -> None:
    model = load_sense_voice_model(model_cache / "tone", prefer_int8=True)
    built: list[int] = []

    def detector() -> OrtSenseVoiceEngine:
        built.append(1)
        return OrtSenseVoiceEngine(model, "sense_voice", AsrConfig())

    engine = SherpaSenseVoiceEngine(model, "sense_voice", detector=detector)
    audio = _tone_samples("打开车门")
    assert built == []
    only = engine.decode_batch([AsrRequest(audio, DecodeOptions(language="auto", languages=("en",)))])[0]
    assert only.lang == "en" and only.lang_probability == 1.0 and built == []  # one language: nothing to detect
    engine.decode_batch([AsrRequest(audio, DecodeOptions(language="zh"))])
    assert built == []
    for _ in range(2):
        chosen = engine.decode_batch([AsrRequest(audio, DecodeOptions(language="auto", languages=("zh", "en")))])[0]
        assert chosen.lang == "zh"
    assert built == [1]


@pytest.mark.timeout(120)
def test_whisper_builds_its_language_step_only_when_auto_has_a_choice(whisper_dir: Path) -> None:
    model = load_whisper_model(whisper_dir)
    built: list[int] = []

    def detector() -> WhisperLanguageDetector:
        built.append(1)
        return WhisperLanguageDetector(model)

    engine = SherpaWhisperEngine(model, "whisper", detector=detector)
    english = read_wav_16k_mono(SPEECH / "en_open_the_car_door_please.wav")
    only = engine.decode_batch([AsrRequest(english, DecodeOptions(language="auto", languages=("en",)))])[0]
    assert only.lang == "en" and only.lang_probability == 1.0 and built == []
    chosen = engine.decode_batch([AsrRequest(english, DecodeOptions(language="auto", languages=("zh", "en")))])[0]
    assert chosen.lang in ("zh", "en") and built == [1]


README_EXAMPLES = (("en_go_forward_ten_meters", "en", "forward"), ("zh_da_kai_che_men", "zh", "车门"))


@pytest.mark.timeout(300)
def test_the_readmes_transcribe_examples_need_no_language(tmp_path: Path, model_cache: Path, whisper_dir: Path,
                                                          turnsense_dir: Path) -> None:
    """The README's two commands as a newcomer runs them: ``kitt-stt transcribe FILE --realtime``
    without ``--language``, against a server with config.yaml's asr, vad, interim and turn sections
    (whisper-base, auto within [zh, en], Silero VAD, interims). Every final (interims and chunks
    decide the segment's language before it) must be in the recording's language."""
    shipped = yaml.safe_load((Path(__file__).parents[1] / "config.yaml").read_text(encoding="utf-8"))
    overrides = {section: shipped[section] for section in ("asr", "vad", "interim", "turn")}
    with run_server(tmp_path, model_cache, overrides) as server:
        for clip, lang, word in README_EXAMPLES:
            printed = subprocess.run([sys.executable, "-m", "kitt_stt", "transcribe", str(SPEECH / f"{clip}.wav"),
                                      "--url", server.url, "--realtime"], capture_output=True, text=True, timeout=120)
            assert printed.returncode == 0, printed.stderr
            finals = [line for line in printed.stdout.splitlines() if line.startswith("final")]
            assert finals and all(f"(lang={lang}," in line for line in finals), printed.stdout
            assert word in " ".join(finals).lower(), printed.stdout


@pytest.mark.parametrize(("preroll_ms", "window_ms"), [(300, 1500), (200, 1000)])
def test_a_segment_decides_once_it_has_the_preroll_and_the_steps_window(preroll_ms: int, window_ms: int) -> None:
    """The decision point follows the configuration (``vad.preroll_ms`` + ``asr.whisper.language_window_ms``),
    not a constant that only matched the defaults."""
    env = {"KITT_STT__VAD__PREROLL_MS": str(preroll_ms), "KITT_STT__ASR__WHISPER__LANGUAGE_WINDOW_MS": str(window_ms),
           "KITT_STT__ASR__LANGUAGE": "auto"}
    config = load_config(None, env=env).config

    class Engine:
        info = type("Info", (), {"languages": ("auto", "zh", "en"), "hotwords": False, "kind": "tone"})()

    settings = SessionUpdates(config, Engine(), "s").current  # type: ignore[arg-type]
    decide_at = (preroll_ms + window_ms) * 16
    asked: list[int] = []

    def detect(audio: np.ndarray) -> LanguageGuess:
        asked.append(audio.shape[0])
        return LanguageGuess("en", 0.9)

    for length, decided in [(decide_at - 320, False), (decide_at, True)]:
        audio = np.zeros(length, dtype=np.int16)
        options = settings.decode_options(TurnLanguage(), lambda audio=audio: audio)
        assert options.segment_language is not None
        options.segment_language.resolve(audio, detect)
        assert (options.segment_language.decided is not None) is decided, length
    assert asked == [decide_at - 320, decide_at]  # a guess on each, the second kept as the decision
