"""Transcribe a whole uploaded file on the live service's scheduler, below live audio.

The file is cut into segments by the same VAD settings as a live seat, and a segment longer than
the engine reads in one decode (``EngineInfo.longest_input_ms``: Whisper's 29.5 s, a TensorRT
profile's length) is cut again at its quietest moment within that length, so no piece is
clipped by the engine (sherpa-onnx's Whisper silently drops audio past 29.5 s, and a 30 s
``vad.max_segment_ms`` piece lost its last word). Every piece is queued at ``Priority.FILE`` (a
live final, chunk or interim always goes first), and each piece's text passes the same text stage
as a live final (script, ITN in the worker process, off the event loop). Segments come back with
their audio time, for ``verbose_json``, SRT and VTT, and one by one as they are decoded, for a
streamed response.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from collections.abc import AsyncGenerator
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
    no_speech: float = 0.0  # P(no speech) from Whisper on ours (its <|nocaptions|> at the first step); else 0


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


#: a cut inside a long piece goes to the quietest stretch of this length (a pause between words,
#: not the closure of one stop consonant)
QUIET_STRETCH_MS = 100


def cut_segments(samples: np.ndarray, vad: VadConfig, longest_ms: int | None = None) -> list[_Piece]:
    """The file's speech segments, as a live seat's VAD would cut the same audio, each of at most
    ``vad.max_segment_ms`` and ``longest_ms`` (the engine's longest input; None: no limit), pre-roll
    included. The VAD's own split at ``max_segment_ms`` is a hard cut, mid-word if the speech goes on;
    with the whole file at hand a long piece is cut at its quietest point instead."""
    limit_ms = min(vad.max_segment_ms, longest_ms or vad.max_segment_ms)
    segmenter = VadSegmenter(vad.model_copy(update={"max_segment_ms": samples.shape[0] * 1000 // SAMPLE_RATE + 1000}))
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
                piece = _Piece(first, onset, event.end_ms, np.concatenate(current))
                pieces += _within(piece, limit_ms * SAMPLE_RATE // 1000)
                current = []
    return pieces


def _within(piece: _Piece, longest: int) -> list[_Piece]:
    """``piece`` in parts of at most ``longest`` samples, each cut at the quietest stretch of its
    second half (so that no part is much shorter than the engine could take)."""
    parts, start = [], 0
    samples = piece.samples
    while samples.shape[0] - start > longest:
        end = _quietest_cut(samples[start + longest // 2: start + longest]) + start + longest // 2
        parts.append((start, end))
        start = end
    parts.append((start, samples.shape[0]))
    def ms(offset: int) -> int:  # file time of a sample offset in the piece
        return piece.first_sample_ms + offset * 1000 // SAMPLE_RATE

    return [_Piece(ms(begin), piece.start_ms if begin == 0 else ms(begin),
                   piece.end_ms if end == samples.shape[0] else ms(end), samples[begin:end])
            for begin, end in parts]


def _quietest_cut(window: np.ndarray) -> int:
    """Sample offset in ``window`` of the middle of its quietest ``QUIET_STRETCH_MS`` (the latest
    among equals, for the longest first part)."""
    frames = window[: window.shape[0] // FRAME_SAMPLES * FRAME_SAMPLES].reshape(-1, FRAME_SAMPLES).astype(np.float32)
    energies = np.einsum("ij,ij->i", frames, frames)
    width = max(1, min(len(energies), QUIET_STRETCH_MS // FRAME_MS))
    stretches = np.convolve(energies, np.ones(width), mode="valid")
    quietest = len(stretches) - 1 - int(np.argmin(stretches[::-1]))
    return (quietest + width // 2) * FRAME_SAMPLES


@dataclass(frozen=True)
class DecodedPiece:
    language: str | None  # what the engine reported for the piece
    segment: Segment | None  # None: the piece said nothing


async def decode_pieces(samples: np.ndarray, scheduler: InferenceScheduler, vad: VadConfig, stage: TextStage,
                        language: str, use_itn: bool, hotwords: tuple[Hotword, ...], engine_itn: bool,
                        languages: tuple[str, ...] = (),
                        longest_ms: int | None = None, words: bool = False) -> AsyncGenerator[DecodedPiece, None]:
    """The file's pieces, decoded and staged, in file order, each as soon as it and those before it
    are done (all are queued at once). ``languages``: what "auto" may detect, as for a live session
    (``asr.auto_languages``); without them Whisper detects among all its languages (on sherpa-onnx
    on a recognizer of its own, which evicts the live sessions' ones, ``asr.max_recognizers``). Each
    piece decides
    its language. ``words``: ask an engine that times words (``EngineInfo.words``) for them; others
    give their tokens' onsets, if any. Closing the iterator early drops the decodes still queued."""
    pieces = await asyncio.to_thread(cut_segments, samples, vad, longest_ms)
    options = DecodeOptions(language=language, use_itn=use_itn, hotwords=hotwords, languages=languages, words=words)
    owner = ("file", uuid.uuid4().hex)  # its own lane in the FILE round-robin
    futures = [scheduler.submit(AsrRequest(piece.samples, _for_piece(options)), Priority.FILE, owner)
               for piece in pieces]
    try:
        for piece, future in zip(pieces, futures, strict=True):
            outcome = await future
            if outcome is None:
                raise DecodeCancelled("the service is shutting down; the file was not transcribed")
            result = outcome.result
            # ITN in the worker process, as for a live final: inline it held the event loop (and so
            # every live session) for each segment, up to hundreds of ms for a long file
            staged = await stage.final_off_loop(result.text, result.lang, engine_itn, detect_wake=False)
            text = staged.text.strip()
            segment = Segment(piece.start_ms / 1000.0, piece.end_ms / 1000.0, text, _words(result, piece),
                              round(result.no_speech_probability or 0.0, 4)) if text else None
            yield DecodedPiece(result.lang, segment)
    except BaseException:  # cancelled, closed early, or a decode failed: drop what is still queued
        scheduler.cancel_owner(owner)
        raise


async def transcript_of(pieces: AsyncGenerator[DecodedPiece, None], samples: np.ndarray,
                        language: str) -> Transcript:
    """The whole file's transcript from its :func:`decode_pieces` (``language`` as asked)."""
    segments: list[Segment] = []
    reported: str | None = None
    async for decoded in pieces:
        reported = reported or decoded.language
        if decoded.segment is not None:
            segments.append(decoded.segment)
    spoken = reported if reported and language == "auto" else language
    return Transcript(join_texts(segment.text for segment in segments), spoken,
                      samples.shape[0] / SAMPLE_RATE, segments)


def _for_piece(options: DecodeOptions) -> DecodeOptions:
    """For "auto": the piece's own segment language (a piece is decoded once, on all its audio)."""
    if options.language != "auto":
        return options
    return dataclasses.replace(options, segment_language=SegmentLanguage(allowed=options.languages))


def _words(result: AsrResult, piece: _Piece) -> tuple[Word, ...]:
    """The engine's timed words (Whisper on ours), else its tokens with their onsets (before ITN),
    when the engine gives either; times in the file's seconds."""
    base = piece.first_sample_ms / 1000.0
    if result.words:
        return tuple(Word(word.text, round(base + word.start_ms / 1000.0, 3), round(base + word.end_ms / 1000.0, 3))
                     for word in result.words)
    if not result.timestamps or len(result.timestamps) != len(result.tokens):
        return ()
    pairs = [(token.strip(), base + stamp) for token, stamp in zip(result.tokens, result.timestamps, strict=True)
             if token.strip() and not token.startswith("<|")]
    ends = [start for _, start in pairs[1:]] + [piece.end_ms / 1000.0]
    return tuple(Word(token, round(start, 3), round(max(start, end), 3))
                 for (token, start), end in zip(pairs, ends, strict=True))
