"""An upload's ``prompt`` as hotwords, bounded in size and in how often it may change; free text
accepted and not used.

Each new hotword list costs a trie build (CPU that holds the GIL) and a place in the engine's
trie cache (``asr.hotword_cache_size``), shared with the live sessions: unbounded, a dozen
uploads with fresh 1000-word prompts built a dozen tries and evicted the tries the cars were
using. So a prompt holds at most ``transcriptions.max_prompt_hotwords`` entries (400 beyond),
and uploads share one process-wide budget (``transcriptions.hotword_changes``) charged when a
prompt's list differs from the previous upload's (429 beyond), as a WebSocket connection's
``server.hotword_changes`` is for its own lists. A batch job that sends one prompt with every
file pays once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from kitt_stt.config.server_config import HotwordChangeBudget
from kitt_stt.hotwords import Hotword, parse_hotwords
from kitt_stt.pipeline.rate_limit import TokenBucket
from kitt_stt.server.openai_errors import ApiError

_SEPARATORS = str.maketrans({"\n": ",", ";": ",", "，": ",", "、": ",", "；": ","})


#: a prompt is prose, not a hotword list, when a sentence ends in it or an entry is this many words
_SENTENCE_END = re.compile(r"\w{2,}[.!?](?:\s|$)|[。！？]")
_PROSE_WORDS = 6


@dataclass(frozen=True)
class Prompt:
    hotwords: tuple[Hotword, ...] = ()
    #: why the prompt was accepted but not used (the response's ``x-kitt-prompt`` header), or None
    ignored: str | None = None


def read_prompt(prompt: str | None, limit: int, biasing: bool) -> Prompt:
    """The prompt as hotwords: one per comma, semicolon or line (``word`` or ``word:boost``, as in
    the WebSocket protocol), on an engine that biases decoding (``biasing``). A free-text prompt
    (OpenAI's documentation's example, a sentence for Whisper's context) is accepted and not used:
    no engine here takes a text context, and read as hotwords it would bias towards whole
    sentences; so is every prompt on an engine that cannot bias. A list is read strictly: an entry
    that is not a valid hotword is refused rather than dropped (400), and so is a list longer than
    ``limit``, counted before any entry is parsed."""
    if not prompt or not prompt.strip():
        return Prompt()
    if not biasing:
        return Prompt(ignored="this engine does not bias decoding; the prompt was not used")
    entries = [entry.strip() for entry in prompt.translate(_SEPARATORS).split(",") if entry.strip()]
    if _SENTENCE_END.search(prompt) or any(len(entry.split()) >= _PROSE_WORDS for entry in entries):
        return Prompt(ignored="free text is not read as hotwords (comma-separated words are); the prompt was not used")
    if len(entries) > limit:
        raise ApiError(400, f"prompt holds {len(entries)} hotwords; this server takes at most {limit} per upload "
                       "(transcriptions.max_prompt_hotwords)", param="prompt", code="too_many_hotwords")
    try:
        return Prompt(parse_hotwords(entries))
    except ValueError as exc:
        raise ApiError(400, f"prompt is read as hotwords separated by commas or lines: {exc}",
                       param="prompt", code="invalid_prompt") from None


class UploadHotwordChanges:
    """The process-wide budget for uploads' hotword lists (event loop only: no lock)."""

    def __init__(self, budget: HotwordChangeBudget) -> None:
        self._budget = budget
        self._bucket = TokenBucket(budget.burst, budget.per_s)
        self._last: tuple[Hotword, ...] = ()

    def admit(self, hotwords: tuple[Hotword, ...]) -> None:
        """Free when ``hotwords`` is empty or the previous upload's list; else takes a token, and
        without one refuses the upload (429) before anything is built."""
        if not hotwords or hotwords == self._last:
            return
        if not self._bucket.allow(1.0):
            budget = self._budget
            raise ApiError(429, f"uploads may bring a new hotword list (prompt) {budget.burst} times at once, then "
                           f"once every {1.0 / budget.per_s:g} s, for the whole server "
                           "(transcriptions.hotword_changes); retry later or reuse the previous prompt",
                           param="prompt", code="rate_limit_exceeded", kind="rate_limit_error")
        self._last = hotwords
