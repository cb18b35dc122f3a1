"""OpenAI compatibility of ``POST /v1/audio/transcriptions`` through the official ``openai`` client
against real servers (issue 33): ``stream=true`` as OpenAI's ``transcript.text.delta``/``done``
events, a free-text ``prompt`` accepted, an upload longer than the engine reads cut to fit, and
word timestamps on an engine that has none said so rather than left silently empty."""

from __future__ import annotations

import asyncio
import time
import wave
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="the openai client is installed by `make test` (dev install)")

from tests.engine_wrappers import SHORT_INPUT_MS  # noqa: E402
from tests.helpers import run_server, tone_pcm, wav_bytes  # noqa: E402

#: OpenAI's documentation's prompt example: prose, for Whisper's context
DOCS_PROMPT = ("The following conversation is a lecture about the recent developments around OpenAI, "
               "GPT-4.5 and the future of AI.")


def client_for(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.http}/v1", api_key="unused", max_retries=0, timeout=60)


def upload(path: Path, client: openai.OpenAI, **options):
    with path.open("rb") as handle:
        return client.audio.transcriptions.create(model="whisper-1", file=handle, **options)


@pytest.fixture(scope="module")
def two_turns(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("upload") / "two-turns.wav"
    path.write_bytes(wav_bytes(tone_pcm("打开车门", tail_ms=1000) + tone_pcm("关车窗", tail_ms=600)))
    return path


def test_stream_sends_a_delta_per_segment_then_done(server, two_turns: Path) -> None:
    client = client_for(server)
    for _ in range(3):  # a streamed upload gives its transcriptions.max_concurrent slot back when done
        events = list(upload(two_turns, client, stream=True))
        assert [event.type for event in events] == ["transcript.text.delta"] * 2 + ["transcript.text.done"]
        assert [event.delta for event in events[:2]] == ["打开车门", "关车窗"]
        assert events[-1].text == "".join(event.delta for event in events[:2]) == "打开车门关车窗"
    assert list(upload(two_turns, client, stream=True, response_format="text"))[-1].text == "打开车门关车窗"
    with pytest.raises(openai.BadRequestError) as no_events_form:
        upload(two_turns, client, stream=True, response_format="verbose_json")
    assert no_events_form.value.body["param"] == "stream"
    assert upload(two_turns, client).text == "打开车门关车窗"  # not streamed: the JSON body as before


def test_a_free_text_prompt_is_accepted_and_said_to_be_unused(server, two_turns: Path) -> None:
    client = client_for(server)
    audio = (two_turns.name, two_turns.read_bytes())
    raw = client.audio.transcriptions.with_raw_response.create(model="whisper-1", file=audio, prompt=DOCS_PROMPT)
    assert raw.parse().text == "打开车门关车窗"
    assert "not used" in raw.headers["x-kitt-prompt"]
    listed = client.audio.transcriptions.with_raw_response.create(model="whisper-1", file=audio, prompt="车门, 车窗:2")
    assert listed.parse().text == "打开车门关车窗" and "x-kitt-prompt" not in listed.headers  # hotwords: used
    with pytest.raises(openai.BadRequestError) as bad_list:
        upload(two_turns, client, prompt="12:30")  # a list entry that is no valid hotword is still refused
    assert bad_list.value.body["param"] == "prompt"


def test_an_upload_longer_than_the_engine_reads_is_cut_at_its_pauses(tmp_path: Path, model_cache: Path) -> None:
    """One VAD segment of 4.8 s (pauses of 250 ms, shorter than vad.silence_ms) on an engine that
    reads 2 s of a decode: decoded whole, it came back with the first 2 s only (as Whisper's
    29.5 s clipped a 30 s piece)."""
    phrases = ["打开车门", "关车窗", "打开车门", "关车窗"]
    pcm = b"".join(tone_pcm(phrase, lead_ms=100, tail_ms=150) for phrase in phrases)
    assert len(pcm) / 32 > 2 * SHORT_INPUT_MS
    path = tmp_path / "long.wav"
    path.write_bytes(wav_bytes(pcm))
    overrides = {"vad": {"silence_ms": 600}}
    with run_server(tmp_path, model_cache, overrides, module="tests.short_input_server") as server:
        verbose = upload(path, client_for(server), response_format="verbose_json")
    assert verbose.text == "".join(phrases)
    assert len(verbose.segments) >= 3  # cut inside the one VAD segment
    assert all(segment.end - segment.start <= SHORT_INPUT_MS / 1000 for segment in verbose.segments)
    assert all(a.end <= b.start for a, b in pairwise(verbose.segments))


SPEECH = Path(__file__).parent / "fixtures" / "speech"


def _voiced(name: str, margin_s: float = 0.1) -> np.ndarray:
    """A speech clip without its leading and trailing silence (``margin_s`` of it kept)."""
    with wave.open(str(SPEECH / f"{name}.wav")) as clip:
        samples = np.frombuffer(clip.readframes(clip.getnframes()), "<i2")
    frames = samples[: samples.shape[0] // 320 * 320].reshape(-1, 320).astype(np.float64)
    level = 10 * np.log10((frames**2).mean(axis=1) + 1)
    voiced = np.flatnonzero(level > level.max() - 35)
    margin = int(margin_s * 16000)
    return samples[max(0, voiced[0] * 320 - margin): (voiced[-1] + 1) * 320 + margin]


@pytest.mark.timeout(300)
def test_whisper_hears_the_end_of_a_long_upload(tmp_path: Path, model_cache: Path, whisper_dir: Path) -> None:
    """32 s of speech without a pause as long as vad.silence_ms: one VAD segment, which the old file
    path split at vad.max_segment_ms (30 s) and decoded whole, and Whisper read 29.5 s of it (the
    phrase ending at 29.9 s lost its last word). Whisper's prompt is accepted and said to be
    unused; asked-for word timestamps come from our Whisper engine (the default), in file time."""
    gap = np.zeros(5120, np.int16)  # 320 ms
    forward, air, door = (_voiced(name) for name in ("en_go_forward_ten_meters", "en_turn_on_the_air_conditioning",
                                                      "en_open_the_car_door_please"))
    parts = [part for _ in range(9) for part in (forward, gap)] + [air, gap, door]
    pcm = np.concatenate(parts)
    air_end = sum(part.shape[0] for part in parts[:19]) / 16000
    assert 29.75 < air_end < 30.0 and pcm.shape[0] / 16000 > 31
    path = tmp_path / "long.wav"
    path.write_bytes(wav_bytes(pcm.tobytes()))
    overrides = {"asr": {"model": "whisper-base", "language": "en"}, "vad": {"silence_ms": 2000}}
    with run_server(tmp_path, model_cache, overrides) as server:
        raw = client_for(server).audio.transcriptions.with_raw_response.create(
            model="whisper-1", file=(path.name, path.read_bytes()), response_format="verbose_json", language="en",
            prompt=DOCS_PROMPT, timestamp_granularities=["word"])
    verbose = raw.parse()
    text = verbose.text.lower()
    assert "conditioning" in text and "open the car" in text, verbose.text  # espeak's "car door" ~ "card or"
    assert all(segment.end - segment.start <= 29.5 for segment in verbose.segments)
    assert "not used" in raw.headers["x-kitt-prompt"]
    assert verbose.words and "x-kitt-words" not in raw.headers
    starts = [word.start for word in verbose.words]
    assert starts == sorted(starts) and all(word.start <= word.end <= pcm.shape[0] / 16000 for word in verbose.words)
    assert verbose.words[-1].start > 29.0  # the last piece's words are placed at its file time, not at 0
    assert "please" in " ".join(word.word.lower() for word in verbose.words[-3:])  # "car door" ~ "card or"


def test_whisper_reports_its_own_no_speech_probability(tmp_path: Path, model_cache: Path, whisper_dir: Path) -> None:
    """With the language detected, our Whisper's first step also gives P(no speech): verbose_json's
    ``no_speech_prob`` is that number (it was always 0.0), low for speech."""
    path = tmp_path / "speech.wav"
    path.write_bytes(wav_bytes(_voiced("en_go_forward_ten_meters").tobytes()))
    with run_server(tmp_path, model_cache, {"asr": {"model": "whisper-base"}}) as server:
        verbose = client_for(server).audio.transcriptions.create(
            model="whisper-1", file=(path.name, path.read_bytes()), response_format="verbose_json")
    assert verbose.segments and all(0.0 < segment.no_speech_prob < 0.5 for segment in verbose.segments)


def test_a_long_piece_without_pauses_is_cut_within_the_limit_and_loses_nothing() -> None:
    """65 s of speech with no gap between phrases: every piece within the engine's 29.5 s, pre-roll
    included, the pieces back to back, and all of the segment's audio decoded exactly once."""
    from kitt_stt.config.schema import VadConfig
    from kitt_stt.server.file_transcription import cut_segments

    speech = np.concatenate([_voiced("en_turn_on_the_air_conditioning", margin_s=0.0)] * 40)
    samples = np.concatenate([np.zeros(8000, np.int16), speech, np.zeros(16000, np.int16)])
    pieces = cut_segments(samples, VadConfig(silence_ms=2000), longest_ms=29_500)
    assert len(pieces) >= 3
    assert all(piece.samples.shape[0] <= 29_500 * 16 for piece in pieces)
    assert all(a.end_ms == b.first_sample_ms == b.start_ms for a, b in pairwise(pieces))
    whole = np.concatenate([piece.samples for piece in pieces])
    start = pieces[0].first_sample_ms * 16
    assert np.array_equal(whole, samples[start:start + whole.shape[0]])


def test_a_stream_the_client_leaves_frees_its_slot_and_drops_its_decodes(tmp_path: Path, model_cache: Path) -> None:
    """transcriptions.max_concurrent: 1, decodes 0.15 s slower: a client that reads the first delta
    of a 12-segment upload and hangs up must not keep the server's one upload slot (the next upload
    would get 429 for ever) nor leave its remaining decodes queued."""
    import httpx

    pcm = tone_pcm("打开车门", tail_ms=600) * 12
    form = {"model": "whisper-1", "stream": "true"}
    overrides = {"transcriptions": {"max_concurrent": 1}}
    with run_server(tmp_path, model_cache, overrides, module="tests.slow_decode_server") as server:
        url = f"{server.http}/v1/audio/transcriptions"
        with httpx.stream("POST", url, files={"file": ("long.wav", wav_bytes(pcm))}, data=form, timeout=30) as sent:
            first = next(line for line in sent.iter_lines() if line.startswith("data: "))
        assert '"transcript.text.delta"' in first
        deadline = time.monotonic() + 10
        while (answer := httpx.post(url, files={"file": ("short.wav", wav_bytes(tone_pcm("关车窗")))},
                                    data={"model": "whisper-1"}, timeout=30)).status_code == 429:
            assert time.monotonic() < deadline, "the slot of the stream the client left was never freed"
            time.sleep(0.1)
        assert answer.status_code == 200 and answer.json()["text"] == "关车窗"
        # left queued, the other 11 decodes (1.65 s of them) would still be waiting here
        assert "kitt_scheduler_queue_depth 0.0" in httpx.get(f"{server.http}/metrics", timeout=10).text
        log = server.log()
    assert "file transcription failed" not in log



async def test_a_stream_the_client_leaves_before_it_starts_frees_its_slot() -> None:
    """A client that hangs up while its upload is still being read or decoded is gone before the
    response starts: Starlette (as uvicorn runs it, ASGI spec 2.3) sees ``http.disconnect`` first and
    cancels the response before its events generator ever runs, and a generator that never ran
    never runs its ``finally``. The slot was freed only there: after ``max_concurrent`` such clients
    every upload got 429 until a restart. Real Starlette, an ASGI peer that has already left."""
    from kitt_stt.server.openai_stream import event_stream

    released: list[bool] = []

    async def pieces():
        yield  # never reached: nobody reads the stream

    async def receive() -> dict:
        return {"type": "http.disconnect"}

    async def send(_message: dict) -> None:
        await asyncio.sleep(0.01)  # a real socket write yields: the disconnect is seen meanwhile

    response = event_stream(pieces(), lambda: released.append(True), {})
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "method": "POST", "headers": []}
    await asyncio.wait_for(response(scope, receive, send), 5)
    assert released == [True]
