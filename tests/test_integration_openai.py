"""The OpenAI-compatible endpoints through the official ``openai`` Python client, against a real server.

Every ``response_format``, ``model`` accepted and reported, ``GET /v1/models``, ``language`` and
``prompt`` (hotwords), the service token, the upload limits (size, length, prompt hotwords and
their server-wide budget, the body read deadline), refused formats and sample rates (all in
OpenAI's error shape, which the client turns into its typed exceptions, FastAPI's own 404/405/422
under /v1 too), uploads queued below live audio on the shared scheduler, and their ITN off the
event loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

openai = pytest.importorskip("openai", reason="the openai client is installed by `make test` (dev install)")

from kitt_stt.scheduler import InferenceScheduler, Priority  # noqa: E402
from kitt_stt.server.upload_audio import decode_upload  # noqa: E402
from tests.helpers import run_server, tone_pcm, wav_bytes  # noqa: E402
from tests.test_scheduler import GatedEngine, block_worker, request  # noqa: E402

TWO_TURNS = tone_pcm("打开车门", tail_ms=1000) + tone_pcm("关车窗", tail_ms=600)


def client_for(server, api_key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.http}/v1", api_key=api_key, max_retries=0, timeout=60)


@pytest.fixture(scope="module")
def fixture_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("upload") / "two-turns.wav"
    path.write_bytes(wav_bytes(TWO_TURNS))
    return path


def transcribe(client: openai.OpenAI, path: Path, **options):
    with path.open("rb") as handle:
        return client.audio.transcriptions.create(model="whisper-1", file=handle, **options)


def test_every_response_format(server, fixture_wav: Path) -> None:
    client = client_for(server)
    as_json = transcribe(client, fixture_wav)
    assert as_json.text == "打开车门关车窗"
    assert as_json.model_extra["model"] == "tone"  # whisper-1 accepted; the model that ran is reported

    assert transcribe(client, fixture_wav, response_format="text").strip() == "打开车门关车窗"

    verbose = transcribe(client, fixture_wav, response_format="verbose_json", timestamp_granularities=["word"])
    assert verbose.text == "打开车门关车窗" and verbose.language == "zh"
    assert verbose.duration == pytest.approx(len(TWO_TURNS) / 32000, abs=0.01)
    assert [segment.text for segment in verbose.segments] == ["打开车门", "关车窗"]
    first, second = verbose.segments
    assert 0.2 <= first.start < first.end < second.start < second.end <= verbose.duration
    assert [word.word for word in verbose.words] == list("打开车门关车窗")
    assert all(word.start <= word.end for word in verbose.words)
    assert verbose.words[0].start == pytest.approx(first.start, abs=0.1)
    assert transcribe(client, fixture_wav, response_format="verbose_json").words is None  # only when asked

    srt = transcribe(client, fixture_wav, response_format="srt")
    cues = srt.strip().split("\n\n")
    assert [cue.split("\n")[0] for cue in cues] == ["1", "2"]
    assert [cue.split("\n")[2] for cue in cues] == ["打开车门", "关车窗"]
    assert cues[0].split("\n")[1].startswith("00:00:00,") and " --> 00:00:0" in cues[0]

    vtt = transcribe(client, fixture_wav, response_format="vtt")
    assert vtt.startswith("WEBVTT\n\n")
    assert [cue.split("\n")[1] for cue in vtt.strip().split("\n\n")[1:]] == ["打开车门", "关车窗"]
    assert "00:00:00." in vtt


def test_models_lists_the_loaded_model(server) -> None:
    models = client_for(server).models.list()
    assert [model.id for model in models.data] == ["tone"]


def test_language_prompt_and_resampled_stereo(server, tmp_path: Path) -> None:
    client = client_for(server)
    # 44.1 kHz stereo: decoded, down-mixed and resampled by the server
    mono16 = np.frombuffer(tone_pcm("关车门"), "<i2")
    times = np.arange(int(mono16.shape[0] * 44100 / 16000)) / 44100
    resampled = np.interp(times, np.arange(mono16.shape[0]) / 16000, mono16.astype(float)).astype("<i2")
    stereo = np.stack([resampled, resampled], axis=1).reshape(-1).tobytes()
    path = tmp_path / "cd.wav"
    path.write_bytes(wav_bytes(stereo, rate=44100, channels=2))
    assert transcribe(client, path, language="zh", prompt="车门, 车窗:2").text == "关车门"

    with pytest.raises(openai.BadRequestError) as refused:
        transcribe(client, path, language="xx")
    assert refused.value.body["param"] == "language" and "xx" in refused.value.body["message"]
    with pytest.raises(openai.BadRequestError) as prose:
        transcribe(client, path, prompt="12:30")  # the protocol's hotword rule: an ambiguous colon is refused
    assert prose.value.body["param"] == "prompt"
    with pytest.raises(openai.BadRequestError) as fmt:
        transcribe(client, path, response_format="tsv")
    assert fmt.value.body["param"] == "response_format"


def test_non_wav_uploads_are_refused_with_the_conversion(server, tmp_path: Path) -> None:
    path = tmp_path / "speech.flac"
    path.write_bytes(b"fLaC" + bytes(4000))
    with pytest.raises(openai.BadRequestError) as refused:
        transcribe(client_for(server), path)
    error = refused.value.body
    assert error["code"] == "unsupported_audio" and "FLAC" in error["message"] and "ffmpeg" in error["message"]
    assert refused.value.response.json()["error"]["type"] == "invalid_request_error"  # OpenAI's shape


def test_token_and_limits(tmp_path: Path, model_cache: Path, fixture_wav: Path) -> None:
    overrides = {"server": {"auth_token": "s3cret"},
                 "transcriptions": {"max_upload_bytes": 200_000, "max_audio_s": 2.0}}
    with run_server(tmp_path, model_cache, overrides) as strict:
        short = tmp_path / "short.wav"
        short.write_bytes(wav_bytes(tone_pcm("打开")))
        assert transcribe(client_for(strict, "s3cret"), short).text == "打开"
        with pytest.raises(openai.PermissionDeniedError):
            transcribe(client_for(strict, "wrong"), short)
        with pytest.raises(openai.PermissionDeniedError):
            client_for(strict, "wrong").models.list()
        with pytest.raises(openai.BadRequestError) as too_long:
            transcribe(client_for(strict, "s3cret"), fixture_wav)  # 4.4 s of audio, 2 s allowed
        assert too_long.value.body["code"] == "audio_too_long"
        big = tmp_path / "big.wav"
        big.write_bytes(wav_bytes(bytes(300_000)))
        with pytest.raises(openai.APIStatusError) as too_big:
            transcribe(client_for(strict, "s3cret"), big)
        assert too_big.value.status_code == 413 and too_big.value.body["code"] == "file_too_large"
        # an unauthenticated request gets 401 before anything is read
        import httpx

        reply = httpx.post(f"{strict.http}/v1/audio/transcriptions", files={"file": ("a.wav", short.read_bytes())})
        assert reply.status_code == 401 and reply.json()["error"]["type"] == "authentication_error"


async def test_uploads_queue_below_every_live_decode() -> None:
    engine = GatedEngine()
    scheduler = InferenceScheduler(engine, workers=1, max_batch=1)
    scheduler.start()
    try:
        blocker = await block_worker(scheduler, engine)
        upload = [scheduler.submit(request(f"file{n}"), Priority.FILE, owner=("file", "a")) for n in range(3)]
        interim = scheduler.submit(request("interim"), Priority.INTERIM, owner="car", coalesce_key=("car", "d"))
        final = scheduler.submit(request("final"), Priority.FINAL, owner="car")
        engine.gate.set()
        await asyncio.gather(blocker, interim, final, *upload)
    finally:
        scheduler.stop()
    assert [batch[0] for batch in engine.batches] == ["blocker", "final", "interim", "file0", "file1", "file2"]


def test_wav_decoding_formats() -> None:
    """24-bit, float and 8-bit WAVs decode to the same 16 kHz samples (within their precision)."""
    reference = np.frombuffer(tone_pcm("打开", lead_ms=50, tail_ms=50), "<i2")
    as_float = reference.astype(np.float32) / 32768.0

    def riff(tag: int, bits: int, payload: bytes, extensible: bool = False) -> bytes:
        import struct

        fmt = struct.pack("<HHIIHH", 0xFFFE if extensible else tag, 1, 16000, 16000 * bits // 8, bits // 8, bits)
        if extensible:
            fmt += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", tag) + bytes(14)
        chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(payload)) + payload
        return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks

    pcm24 = (reference.astype(np.int32) << 8).astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    cases = {"float32": riff(3, 32, as_float.astype("<f4").tobytes()),
             "pcm24-extensible": riff(1, 24, pcm24, extensible=True),
             "pcm16": riff(1, 16, reference.tobytes())}
    for name, data in cases.items():
        decoded = decode_upload(data, f"{name}.wav")
        assert np.abs(decoded.astype(int) - reference.astype(int)).max() <= 1, name


async def test_an_abandoned_upload_leaves_nothing_queued() -> None:
    """A transcription whose task is cancelled (or whose decode failed) takes its queued segment
    decodes with it: nobody waits for them, and they would only delay other uploads."""
    from kitt_stt.config.schema import VadConfig
    from kitt_stt.server.file_transcription import decode_pieces, transcript_of
    from kitt_stt.text import TextStage

    engine = GatedEngine()
    scheduler = InferenceScheduler(engine, workers=1, max_batch=1)
    scheduler.start()
    try:
        blocker = await block_worker(scheduler, engine)
        samples = np.frombuffer(tone_pcm("打开", tail_ms=600) * 4, "<i2")  # four segments
        pieces = decode_pieces(samples, scheduler, VadConfig(silence_ms=300), TextStage(), "zh", True, (), False)
        task = asyncio.create_task(transcript_of(pieces, samples, "zh"))
        while scheduler.queue_depth < 4:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert scheduler.queue_depth == 0
        engine.gate.set()
        await blocker
    finally:
        scheduler.stop()
    assert [batch[0] for batch in engine.batches] == ["blocker"]


def test_upload_itn_runs_in_the_worker_process(tone_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each segment's ITN goes to the worker process, as a live final's does: inline it held the
    event loop, and so every live session, for each segment (a 25-segment upload raised another
    session's worst ping from 1.8 ms to 656 ms)."""
    from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
    from kitt_stt.asr.sense_voice_model import load_sense_voice_model
    from kitt_stt.config.schema import AsrConfig, VadConfig
    from kitt_stt.server.file_transcription import decode_pieces, transcript_of
    from kitt_stt.text import TextStage
    from kitt_stt.text.itn import WetextNormalizer
    from tests.engine_wrappers import NumberWords

    inline: list[str] = []
    original = WetextNormalizer.normalize

    def recording(self: WetextNormalizer, text: str, language) -> str:
        inline.append(text)  # ITN in this process: on the event loop's thread
        return original(self, text, language)

    monkeypatch.setattr(WetextNormalizer, "normalize", recording)
    engine = NumberWords(OrtSenseVoiceEngine(load_sense_voice_model(tone_dir), "tone", AsrConfig()))
    samples = np.frombuffer(tone_pcm("打开车门", tail_ms=700) * 3, "<i2")  # three segments

    async def upload():
        scheduler = InferenceScheduler(engine, workers=1)
        scheduler.start()
        try:
            pieces = decode_pieces(samples, scheduler, VadConfig(engine="webrtc", silence_ms=300), TextStage(),
                                   "zh", False, (), False)
            return await transcript_of(pieces, samples, "zh")
        finally:
            scheduler.stop()

    transcript = asyncio.run(upload())
    assert [segment.text for segment in transcript.segments] == ["空调调到26度" * 20] * 3  # normalised, by the worker
    assert inline == []  # not one segment went through the grammars in this process


def raw_wav(rate: int, payload: bytes) -> bytes:
    """A 16-bit mono WAV whose header says ``rate`` (the stdlib writer would do, but states no intent)."""
    import struct

    fmt = struct.pack("<HHIIHH", 1, 1, rate, rate * 2, 2, 16)
    chunks = b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(payload)) + payload
    return b"RIFF" + struct.pack("<I", 4 + len(chunks)) + b"WAVE" + chunks


def test_a_rate_that_needs_a_huge_filter_is_refused(server, tmp_path: Path) -> None:
    """383999 Hz is coprime with 16 kHz: its filter had 12.3M taps (2 s of audio: 4.5 s of CPU and
    1 GB). Refused, saying which rates work; 384 kHz (1/24) still decodes."""
    path = tmp_path / "odd.wav"
    path.write_bytes(raw_wav(383_999, bytes(2 * 383_999 * 2)))
    with pytest.raises(openai.BadRequestError) as refused:
        transcribe(client_for(server), path)
    error = refused.value.body
    assert error["code"] == "unsupported_audio" and error["param"] == "file"
    assert "383999 Hz" in error["message"] and "44100" in error["message"] and "16000" in error["message"]
    for rate in (8000, 11025, 22050, 44100, 48000, 96000, 384_000):
        assert decode_upload(raw_wav(rate, bytes(rate // 5 * 2)), "ok.wav").shape[0] == 16000 // 5, rate


def test_resampling_memory_is_bounded_by_the_phases() -> None:
    """A 384 kHz file has 769 filter phases: 32768 output samples a step held 600 MB of windows;
    the step is now sized by the phases, and the output is unchanged by how it is cut."""
    import tracemalloc

    from kitt_stt.server import upload_audio

    signal = np.random.default_rng(0).standard_normal(384_000 * 2).astype(np.float32)
    tracemalloc.start()
    try:
        out = upload_audio.resample(signal, 384_000, 16000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert out.shape == (32000,)
    assert peak < 80 << 20, peak  # the signal (3 MB as float64), the kernel and one ~24 MB step
    small = upload_audio.resample(signal[:48_000], 384_000, 16000)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(upload_audio, "_STEP_ELEMENTS", 769 * 7)  # 7 output samples a step
        assert np.array_equal(upload_audio.resample(signal[:48_000], 384_000, 16000), small)


def test_client_text_in_errors_is_quoted_and_bounded(server, tmp_path: Path) -> None:
    long_name = "n" * 5000 + ".flac"
    with pytest.raises(openai.BadRequestError) as by_name:
        client_for(server).audio.transcriptions.create(model="whisper-1", file=(long_name, b"fLaC" + bytes(4000)))
    message = by_name.value.body["message"]
    assert "FLAC" in message and "5005 characters" in message and len(message) < 600, message
    path = tmp_path / "a.wav"
    path.write_bytes(wav_bytes(tone_pcm("打开")))
    with pytest.raises(openai.BadRequestError) as by_language:
        transcribe(client_for(server), path, language="x" * 5000)
    message = by_language.value.body["message"]
    assert "5000 characters" in message and len(message) < 400, message


def test_fastapi_refusals_under_v1_have_openai_shape(server) -> None:
    import httpx

    with pytest.raises(openai.NotFoundError) as unknown:
        client_for(server).models.retrieve("whisper-1")  # GET /v1/models/whisper-1: no such route
    assert unknown.value.body["code"] == "not_found" and "/v1/models/whisper-1" in unknown.value.body["message"]
    wrong_method = httpx.get(f"{server.http}/v1/audio/transcriptions")
    assert wrong_method.status_code == 405 and wrong_method.headers["allow"] == "POST"
    assert wrong_method.json()["error"]["code"] == "method_not_allowed"
    assert wrong_method.json()["error"]["type"] == "invalid_request_error"
    elsewhere = httpx.get(f"{server.http}/nothing-here")
    assert elsewhere.status_code == 404 and elsewhere.json() == {"detail": "Not Found"}  # FastAPI's own, kept


def test_unreadable_requests_under_v1_have_openai_shape() -> None:
    """422 (FastAPI's validation of declared parameters; the upload routes declare none today)."""
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    from kitt_stt.server.openai_errors import install_error_handlers

    app = FastAPI()

    @app.get("/v1/count")
    async def count(n: int) -> dict[str, int]:
        return {"n": n}

    @app.get("/other")
    async def other(n: int) -> dict[str, int]:
        return {"n": n}

    install_error_handlers(app)
    client = TestClient(app)
    refused = client.get("/v1/count", params={"n": "many"})
    assert refused.status_code == 422
    assert refused.json()["error"]["param"] == "query.n" and refused.json()["error"]["type"] == "invalid_request_error"
    assert "detail" in client.get("/other", params={"n": "many"}).json()  # FastAPI's own shape outside /v1


def test_prompt_hotwords_are_capped_and_budgeted(tmp_path: Path, model_cache: Path) -> None:
    """A prompt holds at most max_prompt_hotwords; a new list takes a token of one server-wide
    budget (12 uploads with fresh 1000-word prompts used to build 12 tries, evicting the live
    sessions' ones); the previous upload's list is free; refused uploads build nothing."""
    overrides = {"transcriptions": {"max_prompt_hotwords": 8, "hotword_changes": {"burst": 2, "per_s": 0.001}}}
    with run_server(tmp_path, model_cache, overrides) as strict:
        path = tmp_path / "a.wav"
        path.write_bytes(wav_bytes(tone_pcm("打开")))
        client = client_for(strict)
        before = strict.log()
        with pytest.raises(openai.BadRequestError) as too_many:
            transcribe(client, path, prompt=",".join(f"zzbig{n}" for n in range(9)))
        assert too_many.value.body["code"] == "too_many_hotwords" and too_many.value.body["param"] == "prompt"
        prompts = [",".join(f"zz{i}q{n}" for n in range(8)) for i in range(3)]
        assert transcribe(client, path, prompt=prompts[0]).text == "打开"
        assert transcribe(client, path, prompt=prompts[1]).text == "打开"
        with pytest.raises(openai.RateLimitError) as over_budget:
            transcribe(client, path, prompt=prompts[2])
        assert over_budget.value.body["code"] == "rate_limit_exceeded"
        assert "transcriptions.hotword_changes" in over_budget.value.body["message"]
        assert transcribe(client, path, prompt=prompts[1]).text == "打开"  # the previous list: free
        assert transcribe(client, path).text == "打开"  # no prompt: free
        built = strict.log()[len(before):].count("hotwords have no tokens")  # one warning per trie built
    assert built == 2


def test_a_trickled_body_times_out_and_frees_its_slot(tmp_path: Path, model_cache: Path) -> None:
    """Two uploads that send their body a few bytes at a time held both max_concurrent slots for
    ever; now each is answered 408 after read_timeout_s, and the next upload gets its slot."""
    import socket
    import time

    overrides = {"transcriptions": {"max_concurrent": 2, "read_timeout_s": 3.0}}
    with run_server(tmp_path, model_cache, overrides) as strict:
        path = tmp_path / "a.wav"
        path.write_bytes(wav_bytes(tone_pcm("打开")))
        head = (b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n"
                b"Content-Type: multipart/form-data; boundary=xyz\r\n\r\n--xyz\r\n")
        tricklers = [socket.create_connection(("127.0.0.1", strict.port), timeout=15) for _ in range(2)]
        try:
            for sock in tricklers:
                sock.sendall(head)  # and then nothing more: the rest of the 100000 bytes never comes
            time.sleep(0.5)
            with pytest.raises(openai.RateLimitError):
                transcribe(client_for(strict), path)  # both slots held by the tricklers
            started = time.monotonic()
            for sock in tricklers:
                reply = b""
                while b"\r\n\r\n" not in reply or not reply.rstrip().endswith(b"}"):
                    piece = sock.recv(4096)
                    assert piece, reply
                    reply += piece
                assert reply.startswith(b"HTTP/1.1 408"), reply
                assert b'"code":"request_timeout"' in reply and b"transcriptions.read_timeout_s" in reply
            assert time.monotonic() - started < 10
        finally:
            for sock in tricklers:
                sock.close()
        assert transcribe(client_for(strict), path).text == "打开"  # the slots are free again
