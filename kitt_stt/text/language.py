"""Which language a text is in, as far as the text stage cares: Chinese, English, or another."""

from __future__ import annotations

from kitt_stt.str_enum import StrEnum
from kitt_stt.text.tokens import is_han


class TextLanguage(StrEnum):
    """Languages with steps of their own: script conversion is for Chinese, the ITN grammars are
    Mandarin and English."""

    ZH = "zh"
    EN = "en"


_CHINESE = frozenset({"zh", "yue", "cmn"})


def text_language(lang: str | None, text: str) -> TextLanguage | None:
    """By the language the engine reported (``zh``, ``yue``, ``en``, ``zh-TW``, ...), or, when it
    reported none (``None``, ``auto``), by the characters: Han without kana or Hangul is Chinese,
    Latin letters English.  ``None`` means a language to leave alone (Japanese kanji are not
    Chinese to convert; Korean numbers are not English ones)."""
    base = (lang or "").lower().replace("_", "-").split("-")[0]
    if base in _CHINESE:
        return TextLanguage.ZH
    if base == "en":
        return TextLanguage.EN
    if base not in ("", "auto"):
        return None
    if any("\u3040" <= char <= "\u30ff" or "\uac00" <= char <= "\ud7af" for char in text):
        return None
    if any(is_han(char) for char in text):
        return TextLanguage.ZH
    return TextLanguage.EN if any("a" <= char <= "z" for char in text.lower()) else None
