"""The speaker's words for units, times of day and dates, after the ITN grammars wrote symbols.

WeTextProcessing's grammars write measures the way a form would ("26°", "35km", "20min",
"3:15p.m.", "2024/03/05", "50 %", "¥30"); a driver who said 二十六度, 三十元 or "twenty minutes"
should read "26度", "30元" and "20 minutes" (and "3:15 pm" where "pm" was said so).  Only the
number becomes digits: each abbreviation is replaced by the unit word that is in the spoken text
(an abbreviation whose words are not there is left as written), and times and dates get back the
words they were said with.
"""

from __future__ import annotations

import re

from kitt_stt.text.language import TextLanguage

# abbreviation written by the grammars -> the words it may have been said as, preferred first
_ZH_UNITS: dict[str, tuple[str, ...]] = {
    "°C": ("摄氏度",), "°F": ("华氏度",), "°": ("度",),
    "km/h": ("公里每小时", "千米每小时"), "km": ("公里", "千米"), "cm": ("厘米",), "mm": ("毫米",),
    "m": ("米",), "min": ("分钟",), "h": ("小时",), "s": ("秒",),
    "kg": ("公斤", "千克"), "g": ("克",), "ml": ("毫升",), "l": ("升",), "yd": ("码",),
}
_EN_UNITS: dict[str, tuple[str, ...]] = {
    "mph": ("miles per hour",), "km": ("kilometers", "kilometres", "kilometer", "kilometre"),
    "mi": ("miles", "mile"), "m": ("meters", "metres", "meter", "metre"),
    "cm": ("centimeters", "centimetres", "centimeter", "centimetre"),
    "ft": ("feet", "foot"), "min": ("minutes", "minute"), "h": ("hours", "hour"), "s": ("seconds", "second"),
    "kg": ("kilograms", "kilogram", "kilos", "kilo"), "lb": ("pounds", "pound"),
}


def _unit_pattern(units: dict[str, tuple[str, ...]], space: str) -> re.Pattern[str]:
    names = "|".join(re.escape(unit) for unit in sorted(units, key=len, reverse=True))
    return re.compile(rf"(?<=\d){space}({names})(?![A-Za-z])")


_ZH_UNIT = _unit_pattern(_ZH_UNITS, "")
_EN_UNIT = _unit_pattern(_EN_UNITS, " ")
_ZH_PERIODS = ("凌晨", "早上", "上午", "中午", "下午", "傍晚", "晚上")
_ZH_NOON_TIME = re.compile(r"(\d{1,2}:\d{2})(?::00)?(?:a\.m\.|p\.m\.)")
_ZH_FULL_DATE = re.compile(r"(\d{4})/(\d{1,2})/(\d{1,2})")
_ZH_MONTH_DAY = re.compile(r"(?<![\d/])(\d{1,2})/(\d{1,2})(?![\d/])")
_ZH_YUAN = re.compile(r"¥(\d+(?:\.\d+)?)")
_EN_PERCENT = re.compile(r"(?<=\d) %")
_EN_MERIDIEM = re.compile(r"(?<=\d )([ap])\.m\.")
_EN_PADDED_HOUR = re.compile(r"\b0(\d:\d{2})")


def spoken_units(written: str, spoken: str, language: TextLanguage) -> str:
    """``written`` (the grammars' output for ``spoken``) with units, times and dates in the words
    of ``spoken``."""
    if language is TextLanguage.ZH:
        written = _ZH_UNIT.sub(lambda match: _said(match.group(1), _ZH_UNITS, spoken, ""), written)
        written = _ZH_NOON_TIME.sub(lambda match: _period(spoken, written) + match.group(1), written)
        if "元" in spoken:
            written = _ZH_YUAN.sub(r"\1元", written)
        if "月" in spoken:
            day = "号" if "号" in spoken else "日"
            written = _ZH_FULL_DATE.sub(lambda match: f"{match.group(1)}年{int(match.group(2))}月"
                                                      f"{int(match.group(3))}{day}", written)
            written = _ZH_MONTH_DAY.sub(lambda match: f"{int(match.group(1))}月{int(match.group(2))}{day}", written)
        return written
    written = _EN_UNIT.sub(lambda match: " " + _said(match.group(1), _EN_UNITS, spoken.lower(), "[a-z]"), written)
    written = _EN_PERCENT.sub("%", written)
    if re.search(r"\d\s*[ap]m\b|\b[ap]m\b", spoken, re.IGNORECASE):  # said "pm", not "p m": no dots to add
        written = _EN_MERIDIEM.sub(r"\1m", written)
    return _EN_PADDED_HOUR.sub(r"\1", written)


def _said(unit: str, units: dict[str, tuple[str, ...]], spoken: str, letter: str) -> str:
    """The first word for ``unit`` that occurs in ``spoken`` (not inside a longer word: ``letter``
    is what may not touch it, nothing for Chinese), else the abbreviation itself."""
    if not letter:
        return next((word for word in units[unit] if word in spoken), unit)
    return next((word for word in units[unit] if re.search(rf"(?<!{letter}){word}(?!{letter})", spoken)), unit)


def _period(spoken: str, written: str) -> str:
    """The time-of-day word (下午, 晚上, ...) said with a time the grammar wrote as a.m./p.m., unless
    the written text kept it."""
    return next((period for period in _ZH_PERIODS if period in spoken and period not in written), "")
