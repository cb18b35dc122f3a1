"""What a turn's words say, both ways: ``unfinished`` (``pipeline/turn_text.py``: an ending where
no request can end) holds a turn; the ``complete`` evidence here shortens its wait.

Complete evidence, cheap and engine-neutral: a whole command, a command verb with an object
after it ("open the window", "打开车门"); a number with its unit ("twenty degrees", "20度"); a
question form ("what is the weather like", "...吗"). The combiner, not this module, decides how
much that is worth. Sentence-final punctuation was tried and left out: Whisper punctuates cut
phrases as readily as whole ones ("Front.", "Go forward."), and it did not help held-out speakers.

And a graded view with real language knowledge: ``text_end``, the text view's log-odds that the
user's message ends after these words (``text_model.py``: a small chat model, ~15-25 ms a final),
so the policy calls ``word_evidence`` off the event loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from kitt_stt.pipeline.turn_text import TextEnding, text_ending

_EN_WORD = re.compile(r"[A-Za-z][A-Za-z']*|\d+")
_EN_COMMANDS = frozenset({
    "open", "close", "turn", "play", "call", "navigate", "set", "go", "stop", "start", "take", "find",
    "show", "read", "send", "lower", "raise", "increase", "decrease", "switch", "put", "skip", "pause",
    "resume", "text", "dial", "drive", "lock", "unlock", "mute", "unmute",
})
_EN_QUESTION_STARTS = frozenset({
    "what", "where", "when", "who", "why", "how", "which", "is", "are", "can", "could", "will", "would",
    "do", "does", "did", "should", "shall", "may",
})
_NUMBER_WORDS = ("zero|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|"
                 "fifteen|sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|"
                 "eighty|ninety|hundred|thousand")
_NUMBER_UNIT = re.compile(
    rf"(?:\d+(?:\.\d+)?|\b(?:{_NUMBER_WORDS}))\s*(?:degrees?|meters?|metres?|miles?|kilometers?|km|percent|%|"
    r"minutes?|hours?|seconds?|°c?|度|米|公里|分钟|小时|秒|档|percent)\W*$", re.IGNORECASE)
_ZH_NUMBER_UNIT = re.compile(r"[0-9一二三四五六七八九十百千两]+(?:度|米|公里|分钟|小时|秒|档|号)\W*$")
_ZH_COMMANDS = ("打开", "打開", "关闭", "關閉", "关掉", "關掉", "关上", "關上", "播放", "导航", "導航", "打电话",
                "打電話", "调到", "調到", "调高", "調高", "调低", "調低", "开启", "開啟", "放", "去", "听", "聽")
_ZH_QUESTION = re.compile(r"(?:吗|嗎|呢|么|麼|什么|什麼|怎么样|怎麼樣|多少|几点|幾點|哪里|哪裡)\W*$")
_HAN = re.compile(r"[\u4e00-\u9fff]")
_STRIP = re.compile(r"[\s.,!?;:…。，！？；：、\"'”’)\]}]+$")


@dataclass(frozen=True)
class WordEvidence:
    unfinished: bool  # the ending cannot end a request (turn_text)
    complete_form: bool  # a whole command, a number with its unit, or a question form
    text_end: float | None = None  # the text view's log-odds of "the message ends here"; None: no opinion
    han: bool = False  # the text has Han characters: the text view's log-odds run lower for Chinese


def _complete_form(text: str) -> bool:
    bare = _STRIP.sub("", text)
    if not bare:
        return False
    if _NUMBER_UNIT.search(bare) or _ZH_NUMBER_UNIT.search(bare) or _ZH_QUESTION.search(bare):
        return True
    han = "".join(_HAN.findall(bare))
    if han:
        return any(han.startswith(verb) and len(han) >= len(verb) + 2 for verb in _ZH_COMMANDS)
    words = [w.lower() for w in _EN_WORD.findall(bare)]
    if len(words) >= 2 and words[0] in _EN_COMMANDS:
        return True
    return len(words) >= 3 and words[0] in _EN_QUESTION_STARTS


def word_evidence(text: str, end_score: Callable[[str], float | None] | None = None) -> WordEvidence:
    """Both kinds of evidence for the turn's text so far. ``end_score``: the text view's log-odds
    (the policy passes the model's, the training script the value its feature table cached);
    without it the text view has no opinion."""
    unfinished = text_ending(text) is TextEnding.UNFINISHED
    end = None if end_score is None else end_score(text)
    return WordEvidence(unfinished, not unfinished and _complete_form(text), end, bool(_HAN.search(text)))
