"""A file's transcript in OpenAI's ``response_format`` shapes: json, text, verbose_json, srt, vtt.

The field names and layout are those OpenAI's clients parse (``Transcription``,
``TranscriptionVerbose``); fields a Whisper decoder has and ours has not (log-probabilities,
compression ratio) are written as zeros so typed clients still read the segments. ``model``
is added to the JSON shapes: the model that really ran, whatever name the request gave.
"""

from __future__ import annotations

from typing import Any

from kitt_stt.server.file_transcription import Transcript
from kitt_stt.str_enum import StrEnum


class ResponseFormat(StrEnum):
    JSON = "json"
    TEXT = "text"
    VERBOSE_JSON = "verbose_json"
    SRT = "srt"
    VTT = "vtt"


def as_json(transcript: Transcript, model: str) -> dict[str, Any]:
    return {"text": transcript.text, "model": model}


def as_verbose_json(transcript: Transcript, model: str, words: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "task": "transcribe",
        "language": transcript.language,
        "duration": round(transcript.duration, 3),
        "text": transcript.text,
        "model": model,
        "segments": [
            {"id": index, "seek": 0, "start": segment.start, "end": segment.end, "text": segment.text,
             "tokens": [], "temperature": 0.0, "avg_logprob": 0.0, "compression_ratio": 0.0,
             "no_speech_prob": segment.no_speech}
            for index, segment in enumerate(transcript.segments)
        ],
    }
    if words:
        body["words"] = [{"word": word.word, "start": word.start, "end": word.end} for word in transcript.words]
    return body


def as_srt(transcript: Transcript) -> str:
    cues = [f"{index}\n{_clock(segment.start, ',')} --> {_clock(segment.end, ',')}\n{segment.text}\n"
            for index, segment in enumerate(transcript.segments, start=1)]
    return "\n".join(cues)


def as_vtt(transcript: Transcript) -> str:
    cues = [f"{_clock(segment.start, '.')} --> {_clock(segment.end, '.')}\n{segment.text}\n"
            for segment in transcript.segments]
    return "WEBVTT\n\n" + "\n".join(cues)


def _clock(seconds: float, separator: str) -> str:
    millis = round(seconds * 1000)
    hours, rest = divmod(millis, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    secs, millis = divmod(rest, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{separator}{millis:03d}"
