"""A final's words on the seat's audio clock, written as the final's text is, wake phrase apart.

A segment is decoded in pieces (closed chunks, then the tail), each from its own first sample, so
each piece's words are moved by where that piece starts in the segment, and the segment by where
its buffer (pre-roll included) starts on the seat's clock. The text stage then rewrites the text
(script conversion, ITN) and takes the wake phrase off its front; the words follow: their
characters are taken from the staged text when ITN left it alone and it has as many as the words
(a character-for-character conversion), and the words that spelled the wake phrase (counted
before ITN) are left out as it is left out of ``final.text``. Their confidence still counts for
the segment's, and is the wake's own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from kitt_stt.asr.engine import AsrResult, DecodeOptions
from kitt_stt.asr.words import TimedWord, overall_confidence
from kitt_stt.protocol.frames import WordFrame
from kitt_stt.text import StagedText, TextStage, visible_chars


@dataclass(frozen=True)
class FinalWords:
    words: tuple[TimedWord, ...]  # as sent: the wake phrase's words left out
    confidence: float | None  # the segment's, over all its words
    wake_confidence: float | None  # the lowest of the wake phrase's words (None: no wake, or no words)

    def frame_fields(self) -> dict[str, Any]:
        """``final.confidence`` (left out without words) and ``final.words``."""
        return {"confidence": self.confidence,
                "words": [WordFrame(text=w.text, start_ms=w.start_ms, end_ms=w.end_ms, confidence=w.confidence)
                          for w in self.words]}


def holds_wake(options: DecodeOptions, stage: TextStage) -> bool:
    """Whether a wake phrase in an interim must wait for the final: with ``wake.min_confidence``
    on a words session only the final's words say whether it was heard surely enough, and a
    ``wake`` frame cannot be taken back."""
    return options.words and stage.wake_settings.min_confidence > 0.0


def wake_refused(words: FinalWords, stage: TextStage) -> bool:
    """The final's wake phrase was heard below ``wake.min_confidence``: it does not wake."""
    return words.wake_confidence is not None and words.wake_confidence < stage.wake_settings.min_confidence


def placed_words(pieces: Sequence[tuple[AsrResult, int]], origin_ms: int) -> list[TimedWord]:
    """The pieces' words in order; ``pieces`` are (result, first sample in the segment buffer), and
    ``origin_ms`` is the buffer's first sample on the seat's clock."""
    return [word.shifted(origin_ms + start // 16) for result, start in pieces for word in result.words]


def final_words(words: Sequence[TimedWord], staged: StagedText) -> FinalWords:
    """``words`` (as recognised, in order) matched to ``staged`` (the final as it will be sent):
    the wake match took ``staged.wake_chars`` characters off the front (the phrase and the
    punctuation after it, which belongs to its last word), so the words holding them are the
    wake's. The rest take their characters from the sent text only where that is a one-for-one
    rewrite (script conversion); where ITN rewrote it they stay as the engine wrote them."""
    confidence = overall_confidence(words)
    sent_chars = visible_chars(staged.text)
    wake_count = _words_covering(words, staged.wake_chars) if staged.wake is not None else 0
    wake_words, sent = list(words[:wake_count]), list(words[wake_count:])
    if not staged.itn_changed and sum(len(visible_chars(word.text)) for word in sent) == len(sent_chars):
        sent = _rewritten(sent, sent_chars)
    wake_confidence = min((word.confidence for word in wake_words), default=None)
    return FinalWords(tuple(sent), confidence, wake_confidence)


def _rewritten(words: Sequence[TimedWord], written: Sequence[str]) -> list[TimedWord]:
    out, position = [], 0
    for word in words:
        count = len(visible_chars(word.text))
        out.append(replace(word, text="".join(written[position : position + count])))
        position += count
    return out


def _words_covering(words: Sequence[TimedWord], characters: int) -> int:
    """How many leading words hold the first ``characters`` non-space characters."""
    count, seen = 0, 0
    for word in words:
        if seen >= characters:
            break
        seen += len(visible_chars(word.text))
        count += 1
    return count
