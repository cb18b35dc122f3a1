"""Transcribe a whole uploaded file on the live service's scheduler, below live audio.

The file is cut into segments by the same VAD settings as a live seat (so a long file never
becomes one decode longer than ``vad.max_segment_ms``, which Whisper could not take), every
segment is queued at ``Priority.FILE`` (a live final, chunk or interim always goes first), and
each segment's text passes the same text stage as a live final (script, ITN in the worker
process, off the event loop). Segments come back with their audio time, for ``verbose_json``,
SRT and VTT.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from dataclasses import dataclass, field

import numpy as np

from kitt_stt.asr.engine import AsrRequest, AsrResult, DecodeOptions
from kitt_stt.asr.language import SegmentLanguage
from kitt_stt.audio.vad import (
    FRAME_MS,
    FRAME_SAMPLES,
    SAMPLE_RATE,
    EndReason,
    SpeechAudio,
    SpeechEnded,
    SpeechStarted,
    VadSegmenter,
)
from kitt_stt.config.schema import VadConfig
from kitt_stt.hotwords import Hotword
from kitt_stt.pipeline.text_join import join_texts
from kitt_stt.scheduler import InferenceScheduler, Priority
from kitt_stt.text import TextStage


@dataclass(frozen=True)
class Word:
    word: str
    start: float
    end: float


@dataclass(frozen=True)
class Segment:
    start: float  # seconds of file time: speech onset
    end: float  # last voiced frame (or the cut)
    text: str
    words: tuple[Word, ...] = ()


@dataclass
class Transcript:
    text: str
    language: str
    duration: float
    segments: list[Segment] = field(default_factory=list)

    @property
    def words(self) -> list[Word]:
        return [word for segment in self.segments for word in segment.words]


class DecodeCancelled(RuntimeError):
    """The scheduler dropped the decode (the service is shutting down)."""


@dataclass(frozen=True)
class _Piece:
    first_sample_ms: int  # file time of the piece's first sample (pre-roll included)
    start_ms: int
    end_ms: int
    samples: np.ndarray


def cut_segments(samples: np.ndarray, vad: VadConfig) -> list[_Piece]:
    """The file's speech segments, as a live seat's VAD would cut the same audio."""
    segmenter = VadSegmenter(vad)
    pieces: list[_Piece] = []
    current: list[np.ndarray] = []
    onset = first = 0
    frames = samples[: samples.shape[0] // FRAME_SAMPLES * FRAME_SAMPLES].reshape(-1, FRAME_SAMPLES)
    for index, frame in enumerate([*frames, None]):
        events = segmenter.process(frame) if frame is not None else segmenter.force_end(EndReason.STOP)
        for event in events:
            if isinstance(event, SpeechStarted):
                current = [event.preroll]
                onset = event.audio_ms
                # the pre-roll ends with this frame: its first sample lies that much earlier
                first = max(0, (index + 1) * FRAME_MS - event.preroll.shape[0] * 1000 // SAMPLE_RATE)
            elif isinstance(event, SpeechAudio):
                current.append(event.samples)
            elif isinstance(event, SpeechEnded):
                pieces.append(_Piece(first, onset, event.end_ms, np.concatenate(current)))
                current = []
    return pieces


async def transcribe_file(samples: np.ndarray, scheduler: InferenceScheduler, vad: VadConfig, stage: TextStage,
                          language: str, use_itn: bool, hotwords: tuple[Hotword, ...],
                          engine_itn: bool, languages: tuple[str, ...] = ()) -> Transcript:
    """``languages``: what "auto" may detect, as for a live session (``asr.auto_languages``);
    without them Whisper detects among all its languages on a recognizer of its own, which
    evicts the live sessions' ones (``asr.max_recognizers``). Each piece decides its language."""
    pieces = await asyncio.to_thread(cut_segments, samples, vad)
    options = DecodeOptions(language=language, use_itn=use_itn, hotwords=hotwords, languages=languages)
    owner = ("file", uuid.uuid4().hex)  # its own lane in the FILE round-robin
    futures = [scheduler.submit(AsrRequest(piece.samples, _for_piece(options)), Priority.FILE, owner)
               for piece in pieces]
    try:
        outcomes = await asyncio.gather(*futures)
    except BaseException:  # the request was cancelled, or a decode failed: drop what is still queued
        scheduler.cancel_owner(owner)
        raise
    segments: list[Segment] = []
    reported: str | None = None
    for piece, outcome in zip(pieces, outcomes, strict=True):
        if outcome is None:
            raise DecodeCancelled("the service is shutting down; the file was not transcribed")
        result = outcome.result
        reported = reported or result.lang
        # ITN in the worker process, as for a live final: inline it held the event loop (and so
        # every live session) for each segment, up to hundreds of ms for a long file
        staged = await stage.final_off_loop(result.text, result.lang, engine_itn, detect_wake=False)
        text = staged.text.strip()
        if text:
            segments.append(Segment(piece.start_ms / 1000.0, piece.end_ms / 1000.0, text, _words(result, piece)))
    spoken = reported if reported and language == "auto" else language
    return Transcript(join_texts(segment.text for segment in segments), spoken,
                      samples.shape[0] / SAMPLE_RATE, segments)


def _for_piece(options: DecodeOptions) -> DecodeOptions:
    """For "auto": the piece's own segment language (a piece is decoded once, on all its audio)."""
    if options.language != "auto":
        return options
    return dataclasses.replace(options, segment_language=SegmentLanguage(allowed=options.languages))


def _words(result: AsrResult, piece: _Piece) -> tuple[Word, ...]:
    """The engine's tokens with their onsets (before ITN), when the engine gives timestamps."""
    if not result.timestamps or len(result.timestamps) != len(result.tokens):
        return ()
    base = piece.first_sample_ms / 1000.0
    pairs = [(token.strip(), base + stamp) for token, stamp in zip(result.tokens, result.timestamps, strict=True)
             if token.strip() and not token.startswith("<|")]
    ends = [start for _, start in pairs[1:]] + [piece.end_ms / 1000.0]
    return tuple(Word(token, round(start, 3), round(max(start, end), 3))
                 for (token, start), end in zip(pairs, ends, strict=True))
