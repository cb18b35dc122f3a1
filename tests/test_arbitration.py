"""Seat arbitration (``kitt_stt/pipeline/arbitration.py``): the same voice on several seats of a
connection keeps only the loudest seat's segment; different voices keep theirs; one seat is untouched.

Units run the real ``VadSegmenter`` (webrtc + front end) and ``SeatGate`` on the project's
recordings; the end-to-end tests go through a real server on the tone model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx
import msgpack
import numpy as np
import pytest

from kitt_stt.audio.vad import FRAME_SAMPLES, EndReason, SpeechStarted, VadEvent, VadSegmenter
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.client.session import connect
from kitt_stt.config.schema import VadConfig
from kitt_stt.pipeline.arbitration import Arbiter, Dropped, compare
from kitt_stt.protocol.codec import decode_client_frame
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import ConfigureFrame
from tests.helpers import FRAME_BYTES, collect_until, commits, of_type, silence, tone_pcm

SPEECH = Path(__file__).parent / "fixtures" / "speech"
HUMAN = read_wav_16k_mono(SPEECH / "en_go_forward_ten_meters.wav").astype(np.float64)
OTHER = read_wav_16k_mono(SPEECH / "en_open_the_car_door_please.wav").astype(np.float64)


def level(samples: np.ndarray, rms: float = 3000.0) -> np.ndarray:
    voiced = samples[np.abs(samples) > 300]
    return samples * rms / np.sqrt(np.mean(voiced**2))


def later(samples: np.ndarray, ms: float, db: float = 0.0, length: int | None = None) -> np.ndarray:
    """``samples`` ``ms`` later and ``db`` weaker, padded or cut to ``length``."""
    shift = int(ms * 16)
    out = np.zeros(length or samples.shape[0] + shift)
    body = samples[: out.shape[0] - shift] * 10.0 ** (db / 20.0)
    out[shift : shift + body.shape[0]] = body
    return out


def run_seats(config: VadConfig, microphones: dict[str, np.ndarray],
              frames_per_message: int = 1) -> tuple[dict[str, list[VadEvent]], dict[str, list[VadEvent]],
                                                    list[Dropped | None]]:
    """Each seat's VAD events and those arbitration let through, seat by seat ``frames_per_message``
    frames at a time (a client sending 20 ms per seat and message by default)."""
    verdicts: list[Dropped | None] = []
    arbiter = Arbiter(config, verdicts.append)
    seats = {name: (VadSegmenter(config), arbiter.gate(name)) for name in microphones}
    heard: dict[str, list[VadEvent]] = {name: [] for name in microphones}
    admitted: dict[str, list[VadEvent]] = {name: [] for name in microphones}
    length = min(mic.shape[0] for mic in microphones.values())
    pcm = {name: np.clip(mic, -32768, 32767).astype(np.int16) for name, mic in microphones.items()}
    step = FRAME_SAMPLES * frames_per_message
    for message in range(0, length - step + 1, step):
        for name, (vad, gate) in seats.items():
            for offset in range(message, message + step, FRAME_SAMPLES):
                frame = pcm[name][offset : offset + FRAME_SAMPLES]
                gate.hear(frame)
                events = vad.process(frame)
                heard[name] += events
                admitted[name] += [event for event, _ in gate.admit(events, vad.audio_ms)]
    for name, (vad, gate) in seats.items():  # the end of the stream (a client's close) ends what is open
        events = vad.force_end(EndReason.STOP)
        heard[name] += events
        admitted[name] += [event for event, _ in gate.admit(events, vad.audio_ms)]
    return heard, admitted, verdicts


def starts(events: list[VadEvent]) -> list[int]:
    return [event.audio_ms for event in events if isinstance(event, SpeechStarted)]


def padded(samples: np.ndarray, lead_ms: int = 500, tail_ms: int = 800) -> np.ndarray:
    return np.concatenate([np.zeros(lead_ms * 16), samples, np.zeros(tail_ms * 16)])


def test_compare_finds_the_copy_its_delay_and_level() -> None:
    voice = level(HUMAN)[4000:12000]
    other = np.concatenate([np.zeros(160), voice])  # the other seat's clock starts 10 ms earlier
    copy = later(voice, 2.0, -6.0)[: voice.shape[0]]
    found = compare(copy, other)
    assert found is not None
    assert found.correlation > 0.99 and found.delay_ms == 2.0 and abs(found.level_db - 6.0) < 0.1
    unrelated = compare(level(OTHER)[4000:12000], other)
    assert unrelated is not None and unrelated.correlation < 0.5


def test_bleed_copy_is_dropped_and_the_speaking_seat_untouched() -> None:
    voice = padded(level(HUMAN))
    for order in (("driver", "passenger"), ("passenger", "driver")):  # whichever seat's frames come first
        mics = {"driver": voice, "passenger": later(voice, 2.0, -6.0, voice.shape[0])}
        heard, admitted, verdicts = run_seats(VadConfig(), {name: mics[name] for name in order})
        assert starts(heard["passenger"]), "the bleed opens segments of its own without arbitration"
        assert admitted["passenger"] == []  # nothing of it reaches the seat: no speech_start to end
        assert admitted["driver"] == heard["driver"] and starts(admitted["driver"])
        dropped = [verdict for verdict in verdicts if verdict is not None]
        assert {(d.seat, d.source) for d in dropped} == {("passenger", "driver")}
        assert all(abs(d.comparison.delay_ms - 2.0) < 0.1 and d.comparison.level_db > 5 for d in dropped)


def test_bleed_is_dropped_when_the_bleeding_seats_audio_comes_a_message_ahead() -> None:
    """A client sending 200 ms per seat and message, the bleeding seat's first (or a batch of
    Silero decisions handed to one seat before the next): when its segment is judged, the loud seat
    has not yet heard that stretch, so the verdict waits for it (it was judged on what little
    overlapped, found nothing alike, and kept)."""
    voice = padded(level(HUMAN))
    mics = {"passenger": later(voice, 2.0, -6.0, voice.shape[0]), "driver": voice}
    heard, admitted, _ = run_seats(VadConfig(), mics, frames_per_message=10)
    assert starts(heard["passenger"]) and admitted["passenger"] == []
    assert admitted["driver"] == heard["driver"] and starts(admitted["driver"])


def test_weaker_and_later_bleed_in_four_seats_is_dropped_everywhere() -> None:
    voice = padded(level(OTHER))
    mics = {"driver": later(voice, 1.0, -10.0), "passenger": voice, "rear left": later(voice, 3.0, -15.0),
            "rear right": later(voice, 2.0, -6.0)}
    length = voice.shape[0]
    heard, admitted, _ = run_seats(VadConfig(), {name: mic[:length] for name, mic in mics.items()})
    assert admitted["passenger"] == heard["passenger"] and starts(admitted["passenger"])
    assert sum(len(starts(heard[name])) for name in ("driver", "rear left", "rear right")) > 0
    assert all(admitted[name] == [] for name in ("driver", "rear left", "rear right"))


def test_two_voices_at_once_both_keep_their_segments() -> None:
    first, second = padded(level(HUMAN)), padded(level(OTHER), lead_ms=700)
    length = min(first.shape[0], second.shape[0])
    for stagger in (0.0, 400.0):  # the second speaker may begin while the first is speaking
        second_seat = later(second, stagger, length=length)
        mics = {"driver": first[:length] + later(second_seat, 2.0, -6.0, length),
                "passenger": second_seat + later(first, 2.0, -6.0, length)}
        _, admitted, _ = run_seats(VadConfig(), mics)
        assert starts(admitted["driver"]) and starts(admitted["passenger"]), stagger


def test_a_quiet_seat_between_two_speakers_is_bleed_of_both() -> None:
    first, second = padded(level(HUMAN)), padded(level(OTHER))
    length = min(first.shape[0], second.shape[0])
    first, second = first[:length], second[:length]
    mics = {"driver": first + later(second, 2.0, -6.0, length), "passenger": second + later(first, 2.0, -6.0, length),
            "rear left": later(first, 3.0, -10.0, length) + later(second, 1.0, -10.0, length)}
    heard, admitted, _ = run_seats(VadConfig(), mics)
    assert starts(admitted["driver"]) and starts(admitted["passenger"])
    assert starts(heard["rear left"]) and admitted["rear left"] == []


def test_one_seat_is_untouched_and_arbitration_can_be_turned_off() -> None:
    voice = padded(level(HUMAN))
    heard, admitted, verdicts = run_seats(VadConfig(), {"driver": voice})
    assert admitted == heard and starts(heard["driver"]) and verdicts == []
    mics = {"driver": voice, "passenger": later(voice, 2.0, -6.0, voice.shape[0])}
    heard, admitted, verdicts = run_seats(VadConfig(arbitration=False), mics)
    assert admitted == heard and starts(heard["passenger"]) and verdicts == []


# ----- end to end ------------------------------------------------------------------------------


def bleed_of(pcm: bytes, delay_ms: float, db: float) -> bytes:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    return np.clip(later(samples, delay_ms, db, samples.shape[0]), -32768, 32767).astype("<i2").tobytes()


async def stream_seats(session: Any, pcms: dict[str, bytes]) -> None:
    """Every seat's audio, 20 ms frames interleaved seat by seat, faster than real time."""
    longest = max(len(pcm) for pcm in pcms.values())
    for offset in range(0, longest, FRAME_BYTES):
        for seat, pcm in pcms.items():
            if offset < len(pcm):
                await session.send_audio(pcm[offset : offset + FRAME_BYTES], seat=seat)
        await asyncio.sleep(0.002)


async def test_bleed_copy_gets_no_final_through_a_real_server(server) -> None:
    speech = tone_pcm("打开车门", tail_ms=900)
    async with connect(server.url) as session:
        await session.start(seats=["driver", "passenger"], bleed=True)
        await stream_seats(session, {"driver": speech, "passenger": bleed_of(speech, 2.0, -6.0)})
        frames = await collect_until(session, lambda fs: bool(commits(fs, "driver")), timeout=15)
        await stream_seats(session, {"driver": silence(400), "passenger": silence(400)})
        await session.ping("after")
        frames += await collect_until(session, lambda fs: bool(of_type(fs, "pong")), timeout=10)
    assert [f["text"] for f in of_type(frames, "final", "driver")] == ["打开车门"]
    assert [c["text"] for c in commits(frames, "driver")] == ["打开车门"]
    passenger = [f for f in frames if f.get("seat") == "passenger"]
    assert [f["type"] for f in passenger] == ["bleed"], passenger
    assert passenger[0]["source"] == "driver" and passenger[0]["correlation"] > 0.9
    assert -7.0 < passenger[0]["level_db"] < -5.0 and abs(passenger[0]["delay_ms"] - 2.0) < 0.1
    metrics = httpx.get(f"{server.http}/metrics", timeout=5).text
    assert 'kitt_arbitration_segments_total{outcome="dropped"}' in metrics


def test_bleed_is_a_session_setting_and_refuses_what_is_not_a_bool() -> None:
    frame = decode_client_frame(msgpack.packb({"type": "configure", "bleed": True}))
    assert isinstance(frame, ConfigureFrame) and frame.bleed is True
    with pytest.raises(ProtocolError) as refused:
        decode_client_frame(msgpack.packb({"type": "start", "bleed": "yes"}))
    assert refused.value.code is ErrorCode.BAD_FIELD


async def test_two_different_voices_both_get_finals_through_a_real_server(server) -> None:
    driver, passenger = tone_pcm("打开车门", tail_ms=900), tone_pcm("ABCDEF", tail_ms=900)
    length = max(len(driver), len(passenger))
    # at the same time on two seats; the cross-bleed of double talk is the units' (the tone model would
    # transcribe a -6 dB copy of the other seat's tones as words of its own)
    mix = {"driver": driver.ljust(length, b"\0"), "passenger": passenger.ljust(length, b"\0")}
    async with connect(server.url) as session:
        await session.start(seats=["driver", "passenger"], bleed=True)
        await stream_seats(session, mix)
        frames = await collect_until(session, lambda fs: {c["seat"] for c in commits(fs)} == {"driver", "passenger"},
                                     timeout=15)
    assert [f["text"] for f in of_type(frames, "final", "driver")] == ["打开车门"]
    assert [f["text"] for f in of_type(frames, "final", "passenger")] == ["ABCDEF"]
    assert of_type(frames, "bleed") == []


async def test_a_session_that_streams_copies_on_purpose_turns_arbitration_off(server) -> None:
    speech = tone_pcm("关车窗", tail_ms=900)
    async with connect(server.url) as session:
        await session.start(seats=["driver", "passenger"], arbitration=False, bleed=True)
        await stream_seats(session, {"driver": speech, "passenger": bleed_of(speech, 2.0, -6.0)})
        frames = await collect_until(session, lambda fs: {c["seat"] for c in commits(fs)} == {"driver", "passenger"},
                                     timeout=15)
    assert {(c["seat"], c["text"]) for c in commits(frames)} == {("driver", "关车窗"), ("passenger", "关车窗")}
    assert of_type(frames, "bleed") == []


def test_a_seat_that_spoke_earlier_is_not_compared_with_a_seat_speaking_now() -> None:
    """Seats are compared by their audio clocks: one that streamed its speech and stopped holds the
    same audio at the same clock positions as a seat that now streams the same words, but not at the
    same moment, so the later seat keeps its segment."""
    speech = level(HUMAN)
    onset = int(np.argmax(np.abs(speech) > 300))
    voice = np.concatenate([np.zeros(300 * 16), speech[onset : onset + 900 * 16]])  # short: still in the ring
    verdicts: list[Dropped | None] = []
    arbiter = Arbiter(VadConfig(), verdicts.append)
    first, second = (VadSegmenter(VadConfig()), arbiter.gate("first")), (VadSegmenter(VadConfig()),
                                                                          arbiter.gate("second"))
    pcm = voice.astype(np.int16)
    admitted: list[VadEvent] = []
    for vad, gate in (first, second):  # one after the other, as a client that streams seat by seat
        for offset in range(0, pcm.shape[0] - FRAME_SAMPLES + 1, FRAME_SAMPLES):
            frame = pcm[offset : offset + FRAME_SAMPLES]
            gate.hear(frame)
            events = vad.process(frame)
            if gate.seat == "second":
                admitted += [event for event, _ in gate.admit(events, vad.audio_ms)]
    assert starts(admitted) and verdicts and all(verdict is None for verdict in verdicts)

