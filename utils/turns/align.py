"""Cuts in the middle of a sentence, at word boundaries found by forced alignment.

The pause cuts of ``corpus.py`` stop a turn at its longest inner pauses: phrase boundaries, where
the part is often a whole phrase itself ("Front" of "Front Center"). What a user who stops to
think sounds like is a sentence broken off anywhere, so for the human clips whose transcript is
known, pocketsphinx 5 aligns the transcript to the audio (its default US English acoustic model
and CMU dictionary, shipped in the wheel) and the clip is cut after about 1/3 and 2/3 of its
words, never after the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

FRAME_SAMPLES = 160  # pocketsphinx's 10 ms frames at 16 kHz
CUT_FRACTIONS = (1 / 3, 2 / 3)


class AlignError(Exception):
    """The transcript could not be aligned (a word outside the dictionary, no segments)."""


@dataclass(frozen=True)
class Word:
    text: str
    end_sample: int  # just after the word's last frame


@lru_cache(maxsize=1)
def _decoder() -> Any:
    try:
        from pocketsphinx import Decoder
    except ImportError as exc:
        raise AlignError(f"pocketsphinx is not installed (the dev extra): {exc}") from None
    return Decoder(samprate=16000, bestpath=False, loglevel="FATAL")


def align(samples: np.ndarray, transcript: str) -> list[Word]:
    """The transcript's words with where each ends in ``samples`` (int16, 16 kHz)."""
    decoder = _decoder()
    try:
        decoder.set_align_text(transcript)
        decoder.start_utt()
        decoder.process_raw(samples.astype(np.int16).tobytes(), full_utt=True)
        decoder.end_utt()
        segments = list(decoder.seg())
    except (RuntimeError, ValueError, KeyError) as exc:
        raise AlignError(f"{transcript!r}: {exc}") from None
    words = [Word(seg.word.split("(")[0], (seg.end_frame + 1) * FRAME_SAMPLES) for seg in segments
             if not seg.word.startswith(("<", "["))]
    if len(words) != len(transcript.split()):
        raise AlignError(f"{transcript!r}: aligned {len(words)} of {len(transcript.split())} words")
    return words


def word_cut_counts(words: int) -> list[int]:
    """How many words each mid-sentence cut keeps: about 1/3 and 2/3 of them, at least one, never all."""
    return sorted({min(words - 1, max(1, round(words * fraction))) for fraction in CUT_FRACTIONS} - {0})


def word_cuts(samples: np.ndarray, transcript: str) -> list[tuple[int, str]]:
    """(cut position in samples, the words kept) for each mid-sentence cut of the clip."""
    words = align(samples, transcript)
    return [(words[kept - 1].end_sample, " ".join(w.text for w in words[:kept]))
            for kept in word_cut_counts(len(words))]
