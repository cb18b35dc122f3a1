"""What a turn's words say about whether the speaker is done.

The end-of-turn model hears prosody, not words, and it is often sure of itself on a phrase cut
at a word boundary ("turn on the", "把空调"). The words catch what it misses there: a turn
whose text ends on a word that cannot end a request (an article, conjunction, preposition,
possessive, filler, or the Mandarin equivalents) is unfinished, whatever the model says; the
end-of-turn policy then holds it longer (``turn.unfinished_*`` settings, ``docs/turns.md``).
Everything else is ``open``: the words do not decide, the model does.

Lists, not a model: they are short, auditable, cost microseconds, and behave the same on every
engine's output (the text may carry Whisper's punctuation and traditional characters).
"""

from __future__ import annotations

import re

from kitt_stt.str_enum import StrEnum


class TextEnding(StrEnum):
    UNFINISHED = "unfinished"  # ends where a request cannot end
    OPEN = "open"  # the words do not say


# English words that do not end a request. Kept out on purpose because they end real requests:
# "it", "that", "on", "off", "up", "over", "by" ("turn it off", "pull over", "stand by"), "you"
# ("thank you"), "her" ("call her"), "so" ("I think so"), auxiliaries ("yes I can").
_ENGLISH_UNFINISHED = frozenset({
    "a", "an", "the",
    "and", "or", "but", "nor", "because", "if", "than", "unless", "whether", "while", "although",
    "to", "of", "for", "with", "from", "at", "into", "onto", "towards", "toward", "via", "without", "between",
    "my", "your", "his", "our", "their", "its",
    "um", "uh", "er", "erm", "hmm", "mm",
    "very", "really", "quite",
})

# Mandarin endings that leave a request hanging: a conjunction, a coverb waiting for its object
# ("把空调"), "I want" waiting for its verb ("我想"), a filler ("嗯", "呃"). Traditional forms
# where they differ. Matched as suffixes, so single characters are only those that do not end
# common words: not 和 (暖和), 向 (方向), 请 (申请), 让 (转让), 往 (以往), 从 (服从), 将 (大将).
# Kept out because they end complete replies: 的 (好的), 到 (收到), 在 (我在), 对, 要/能/可以
# (不要, 可以), 这个/那个 ("this one"), 就是 ("exactly"), 麻烦 (太麻烦).
_MANDARIN_UNFINISHED = tuple(sorted({
    "跟", "把", "被",
    "或者", "还是", "還是", "还有", "還有", "然后", "然後", "但是", "可是", "而且",
    "因为", "因為", "所以", "如果", "要是", "并且", "並且",
    "帮我", "幫我", "给我把", "給我把", "我想", "我要", "我需要", "我打算",
    "嗯", "呃",
}, key=len, reverse=True))
_MANDARIN_FINISHED_COMPOUNDS = ("一把", "车把", "車把", "被被")  # end in 把/被 but complete
# 把 puts the object before the verb: "把空调" (at most two characters after the last 把, too short
# for an object and its verb; "把它关了" has three) still waits for the verb.
_BA_WITHOUT_VERB = re.compile(r"把[^把，。！？、,.!?\s]{1,2}$")

_TRAILING_PUNCTUATION = re.compile(r"[\s.,!?;:…。，！？；：、\"'”’)\]}]+$")
_LAST_LATIN_WORD = re.compile(r"([A-Za-z][A-Za-z']*)$")


def text_ending(text: str) -> TextEnding:
    """Classify the end of a turn's text (engine punctuation at the end is ignored)."""
    stripped = _TRAILING_PUNCTUATION.sub("", text)
    if not stripped:
        return TextEnding.OPEN
    word = _LAST_LATIN_WORD.search(stripped)
    if word is not None:
        unfinished = word.group(1).lower() in _ENGLISH_UNFINISHED
    else:
        unfinished = ((stripped.endswith(_MANDARIN_UNFINISHED) and not stripped.endswith(_MANDARIN_FINISHED_COMPOUNDS))
                      or _BA_WITHOUT_VERB.search(stripped) is not None)
    return TextEnding.UNFINISHED if unfinished else TextEnding.OPEN
