"""Does an English sentence end here? The CMU trigram language model's answer, as one number.

``sentence_end(text)`` is log10 P(</s> | the last two words) minus log10 P(</s>): how much more
(> 0) or less (< 0) likely than on average the model finds that the sentence ends after these
words. "open the window" scores about +0.6, "open the" about -1.5; 0 means "no opinion", which is
also what every case the model cannot judge gets: text with no Latin words (Mandarin, Japanese,
Korean: no Mandarin LM is shipped), a last word the model does not know (another language, a
recognizer's noise), or no model at all.

The model is the 27 MB ``en-us.lm.bin`` inside the ``pocketsphinx`` wheel (CMU; BSD-2-Clause), read
once per process on first use (tens of ms and some 30 MB of the process's own memory: pocketsphinx
reads it into the heap; measured in docs/turns.md), under a lock, by whichever thread asks first:
the fused policy asks from its own worker thread, never the event loop. A scoring call takes a few
microseconds, also under a lock: the model's lookups update a cache inside it (today the GIL
serialises them anyway; a free-threaded Python would not). pocketsphinx 5.0.4 has Linux wheels for
CPython 3.10-3.13 on x86_64 and none for aarch64: where it is not installed (Jetson Orin, unless
built from its sdist) the feature stays neutral and a warning says so once (docs/turns.md). """

from __future__ import annotations

import logging
import math
import re
import threading
from typing import Any

log = logging.getLogger(__name__)

LM_NAME = "en-us/en-us.lm.bin"
_TO_LOG10 = math.log(1.0001) / math.log(10)  # pocketsphinx returns log base 1.0001
_UNKNOWN = -536870912  # pocketsphinx's log of zero: the word is not in the vocabulary
_NON_LATIN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)*|\d+")
_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


def number_words(number: int) -> list[str]:
    """English words of 0 .. 999,999 (the LM knows "ten", not "10"); larger numbers: one word."""
    if number < 20:
        return [_ONES[number]]
    if number < 100:
        return [_TENS[number // 10]] + ([_ONES[number % 10]] if number % 10 else [])
    if number < 1000:
        return [_ONES[number // 100], "hundred"] + (number_words(number % 100) if number % 100 else [])
    if number < 1_000_000:
        return number_words(number // 1000) + ["thousand"] + (number_words(number % 1000) if number % 1000 else [])
    return ["million"]


def english_words(text: str) -> list[str]:
    """The text's words as the LM spells them (lower case, digits as words); none for CJK text."""
    if _NON_LATIN.search(text):
        return []
    words: list[str] = []
    for token in _WORD.findall(text.lower().replace("’", "'")):
        # a run of digits longer than any number is read as one big number (int() refuses > 4300 digits)
        words += (number_words(int(token)) if len(token) <= 7 else ["million"]) if token.isdigit() else [token]
    return words


class SentenceEndModel:
    """The trigram model's end-of-sentence probability after a word history."""

    def __init__(self, ngram: Any) -> None:
        self._ngram = ngram
        self._lookups = threading.Lock()  # the model's lookups write its internal cache
        self._base = ngram.prob(["</s>"])

    def _prob(self, words: list[str]) -> int:
        with self._lookups:
            return int(self._ngram.prob(words))

    def known(self, word: str) -> bool:
        return self._prob([word]) > _UNKNOWN

    def lift(self, words: list[str]) -> float:
        """log10 P(</s> | last two words) - log10 P(</s>); 0 when the last word is unknown."""
        if not words or not self.known(words[-1]):
            return 0.0
        before = words[-2] if len(words) >= 2 else "<s>"
        history = [words[-1], before] if before == "<s>" or self.known(before) else [words[-1]]
        return (self._prob(["</s>", *history]) - self._base) * _TO_LOG10


_lock = threading.Lock()
_loaded: list[SentenceEndModel | None] = []  # empty: not tried yet; [None]: not available here


def load_model() -> SentenceEndModel | None:
    """The process's one model, read on first use; None (warned once) where it is not available."""
    with _lock:
        if not _loaded:
            _loaded.append(_read())
        return _loaded[0]


def _read() -> SentenceEndModel | None:
    try:
        import pocketsphinx
    except ImportError as exc:
        log.warning("turn.policy fused: pocketsphinx is not installed (%s; the eot-lm extra, which has no "
                    "aarch64 wheel, so the Jetson Orin image lacks it); the sentence-end language model "
                    "feature is neutral, the policy runs on the others (docs/turns.md)", exc)
        return None
    try:
        return SentenceEndModel(pocketsphinx.NGramModel.readfile(pocketsphinx.get_model_path(LM_NAME)))
    except (OSError, RuntimeError, ValueError) as exc:
        log.warning("end of turn: cannot read the sentence-end language model %s (%s); the feature is neutral",
                    LM_NAME, exc)
        return None


def sentence_end(text: str) -> float:
    """The LM's "the sentence ends here" score for the text's last words (module docstring); 0: no opinion."""
    words = english_words(text)
    if not words:
        return 0.0
    model = load_model()
    return 0.0 if model is None else model.lift(words)
