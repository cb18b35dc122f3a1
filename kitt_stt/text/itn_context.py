"""What the ITN grammars must not see whole: punctuation, and English clock times they misread.

The grammars tokenise punctuation and write it back as a token of its own, so "five thirty." came
out as "5:30 ." and "twenty percent?" as "20% ?"; a double quote even makes ``wetext`` fail. So the
text is cut at its punctuation and only the runs between the marks go to the grammars: every mark
stays exactly where it was, with the spacing it had. A dot, comma or colon inside a number (3.5,
1,200, 10:45) or a dot of a letter abbreviation (a.m., p.m.) is not a mark to cut at.

The grammar reads only lower-case words, so a capitalised number word that starts a sentence
("Twenty!") goes to it in lower case, and gets its capital back if it stays a word ("One of them").

The English grammar reads an hour of ten to twelve followed by minutes as a year ("ten forty five"
became 1045), and "seven oh five" as 705; after a word that announces a time ("at", "by",
"until", ...) such words are written as the clock time here, before the grammar sees them. A
time followed by "am"/"pm"/"o'clock" is left to the grammar, which reads those right. It reads
"twenty one" but not "twenty-one" (as Whisper writes it), so the hyphen goes first.
"""

from __future__ import annotations

import re

#: marks that are never part of a number or a word (not "-", "'", "%", "$": those belong to them)
_MARKS = "!?;\"()[]{}…，。！？、；：“”（）《》「」【】『』"
_PUNCTUATION = re.compile(
    r"\s*(?:"
    r"(?<!\d)[,:]|[,:](?!\d)"  # a comma or colon, unless between digits (1,200, 10:45)
    r"|(?<![\s.][A-Za-z])(?:(?<!\d)\.|\.(?!\d))"  # a dot, unless in a number (3.5) or after one letter (a.m.)
    rf"|[{re.escape(_MARKS)}]"
    r")\s*")

_UNITS = "one|two|three|four|five|six|seven|eight|nine"
_TEENS = "ten|eleven|twelve|thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen"
_TENS = "twenty|thirty|forty|fifty"
_HOURS = {word: hour for hour, word in enumerate(
    [*_UNITS.split("|"), *_TEENS.split("|"), "twenty", "twenty one", "twenty two", "twenty three"], start=1)}
_VALUES = {word: value for value, word in enumerate([*_UNITS.split("|"), *_TEENS.split("|")], start=1)}
_VALUES |= {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
_CLOCK = re.compile(
    r"\b(?P<lead>at|by|until|till|around|before|after|from|between|for)\s+"
    r"(?P<hour>twenty[\s-](?:one|two|three)|" + _TEENS + "|" + _UNITS + "|twenty)\\s+"
    r"(?P<minute>oh\s+(?:" + _UNITS + ")|(?:" + _TENS + r")(?:[\s-](?:" + _UNITS + "))?|" + _TEENS + ")"
    # not when more number words, "am"/"pm" or a unit follow: then it is no clock time, or the grammar's
    r"\b(?![\s-]+(?:" + _UNITS + r"|a\.?\s?m|p\.?\s?m|o'clock|minutes?|seconds?|hours?|days?|percent"
    r"|dollars?|cents?)\b)",
    re.IGNORECASE)
_HYPHENATED = re.compile(rf"\b({_TENS}|sixty|seventy|eighty|ninety)-(?=(?:{_UNITS})|(?:first|second|third|"
                         r"fourth|fifth|sixth|seventh|eighth|ninth)\b)", re.IGNORECASE)


def split_punctuation(text: str) -> list[str]:
    """``text`` in pieces; the odd ones are punctuation marks with the spaces around them, to keep
    as they are."""
    pieces, last = [], 0
    for match in _PUNCTUATION.finditer(text):
        pieces += [text[last:match.start()], match.group()]
        last = match.end()
    return [*pieces, text[last:]]


def lowered_start(text: str, number: re.Pattern[str]) -> tuple[str, str]:
    """``text`` with a capitalised number word at its start in lower case (the grammar reads only
    lower case, and ASR capitalises sentence starts: "Twenty!"), and that word as it was ("" when
    nothing changed), for :func:`restored_start`."""
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    word = first.split("-", 1)[0]
    if not word[:1].isupper() or not number.fullmatch(word):
        return text, ""
    return text[: len(word)].lower() + text[len(word):], word


def restored_start(written: str, word: str) -> str:
    """``written`` with the start word :func:`lowered_start` lowered put back where it is still a word."""
    if word and re.match(rf"{re.escape(word.lower())}\b", written):
        return word + written[len(word):]
    return written


def english_number_words(text: str) -> str:
    """``text`` with the clock times after "at", "by", "until", ... written as digits ("at 10:45"),
    and hyphenated number words ("twenty-one", "forty-second") as two words, as the grammar reads them."""
    text = _HYPHENATED.sub(r"\1 ", text)  # "twenty-one" is two number words to the grammar too
    return _CLOCK.sub(_clock, text)


def _clock(match: re.Match[str]) -> str:
    hour = _HOURS[" ".join(match.group("hour").lower().replace("-", " ").split())]
    words = match.group("minute").lower().replace("-", " ").split()
    minute = sum(_VALUES.get(word, 0) for word in words)  # "oh" counts nothing
    return f"{match.group('lead')} {hour}:{minute:02d}"
