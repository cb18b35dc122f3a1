"""Inverse text normalisation: the fixtures, the speaker's unit words, which texts reach the grammars."""

from __future__ import annotations

import pytest

from kitt_stt.text import itn
from kitt_stt.text.itn import ItnParams, WetextNormalizer
from kitt_stt.text.itn_style import spoken_units
from kitt_stt.text.language import TextLanguage, text_language
from utils.performance.itn_compare import load_cases

NORMALIZER = WetextNormalizer()
#: fixtures the chosen grammars get wrong, measured (docs/text.md): single digits without a unit
#: stay characters (the grammars leave 0-9 alone so that 一点都不, 一个人 stay), "minus" is not a
#: sign
KNOWN_WRONG = {
    "外面零下五度": "外面零下五度",
    "明天早上七点叫我": "明天早上七点叫我",
    "导航到第三个路口": "导航到第三个路口",
    "打开第二排座椅加热": "打开第二排座椅加热",
    "播放第五首歌": "播放第五首歌",
    "座椅加热调到三档": "座椅加热调到三档",
    "it is minus five degrees outside": "it is minus five degrees outside",
}
CASES = load_cases()


@pytest.mark.parametrize(("lang", "kind", "spoken", "accepted"), CASES, ids=[case[2] for case in CASES])
def test_fixture(lang: str, kind: str, spoken: str, accepted: tuple[str, ...]) -> None:
    written = NORMALIZER.normalize(spoken, TextLanguage(lang))
    if spoken in KNOWN_WRONG:
        assert written == KNOWN_WRONG[spoken] and written not in accepted
    else:
        assert written in accepted


def test_the_issue_example_and_the_grammars_own_style() -> None:
    assert NORMALIZER.normalize("调到二十六度", TextLanguage.ZH) == "调到26度"
    raw = WetextNormalizer(ItnParams(spoken_units=False))
    assert raw.normalize("调到二十六度", TextLanguage.ZH) == "调到26°"
    assert raw.normalize("arrive in twenty minutes", TextLanguage.EN) == "arrive in 20 min"


@pytest.mark.parametrize(("written", "spoken", "language", "expected"), [
    ("还有35km，前方500m右转", "还有三十五公里，前方五百米右转", TextLanguage.ZH, "还有35公里，前方500米右转"),
    ("10km", "十千米", TextLanguage.ZH, "10千米"),
    ("25°C", "二十五摄氏度", TextLanguage.ZH, "25摄氏度"),
    ("60km/h", "六十公里每小时", TextLanguage.ZH, "60公里每小时"),
    ("20min后", "二十分钟后", TextLanguage.ZH, "20分钟后"),
    ("3:15p.m.到", "下午三点十五分到", TextLanguage.ZH, "下午3:15到"),
    ("7:30a.m.", "早上七点半", TextLanguage.ZH, "早上7:30"),
    ("2024/03/05", "二零二四年三月五日", TextLanguage.ZH, "2024年3月5日"),
    ("10/01出发", "十月一号出发", TextLanguage.ZH, "10月1号出发"),
    ("1/3", "三分之一", TextLanguage.ZH, "1/3"),  # a fraction, not a date
    ("30m", "三十m", TextLanguage.ZH, "30m"),  # no unit word to give back
    ("drive 100 mi", "drive one hundred miles", TextLanguage.EN, "drive 100 miles"),
    ("1 mi to go", "one mile to go", TextLanguage.EN, "1 mile to go"),
    ("25 mph", "twenty five miles per hour", TextLanguage.EN, "25 miles per hour"),
    ("50 % left", "fifty percent left", TextLanguage.EN, "50% left"),
    ("at 03:30", "at three thirty", TextLanguage.EN, "at 3:30"),
    ("10 m", "ten smiles", TextLanguage.EN, "10 m"),  # "mile" inside another word is not the unit
])
def test_spoken_units(written: str, spoken: str, language: TextLanguage, expected: str) -> None:
    assert spoken_units(written, spoken, language) == expected


def test_texts_without_numbers_never_reach_the_grammars(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(language: TextLanguage) -> None:
        raise AssertionError("grammar called")

    monkeypatch.setattr(itn, "_normalizer", refuse)
    for text, language in (("打开车门", TextLanguage.ZH), ("open the window", TextLanguage.EN),
                           ("pass me the phone", TextLanguage.EN), ("", TextLanguage.ZH)):
        assert NORMALIZER.normalize(text, language) == text
    with pytest.raises(AssertionError, match="grammar called"):
        NORMALIZER.normalize("turn left at the fourth light", TextLanguage.EN)


@pytest.mark.parametrize(("lang", "text", "expected"), [
    ("zh", "open", TextLanguage.ZH),
    ("yue", "", TextLanguage.ZH),
    ("zh-TW", "", TextLanguage.ZH),
    ("en", "打开", TextLanguage.EN),
    ("ja", "車門を開けて", None),
    ("ko", "", None),
    (None, "打开GPS", TextLanguage.ZH),
    ("auto", "Open the door", TextLanguage.EN),
    (None, "車門を開けて", None),  # kana: Japanese, not Chinese
    (None, "문을 열어", None),
    (None, "123", None),
])
def test_text_language(lang: str | None, text: str, expected: TextLanguage | None) -> None:
    assert text_language(lang, text) is expected
