"""Script conversion: phrase-level OpenCC, Chinese only, shared safely between threads."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from kitt_stt.text.script import OpenCCConverter, ScriptMode

SIMPLIFIED = OpenCCConverter(ScriptMode.SIMPLIFIED)
TRADITIONAL = OpenCCConverter(ScriptMode.TRADITIONAL)


def test_whisper_traditional_becomes_simplified() -> None:
    assert SIMPLIFIED.convert("大開車門，調到二十六度") == "大开车门，调到二十六度"


def test_conversion_is_by_phrase_not_by_character() -> None:
    # 发 is 髮 (hair) in 头发 but 發 (send out) in 发展: a character table cannot know which
    assert TRADITIONAL.convert("头发") == "頭髮"
    assert TRADITIONAL.convert("发展") == "發展"
    assert TRADITIONAL.convert("头") + TRADITIONAL.convert("发") != TRADITIONAL.convert("头发")
    # 乾 is 干 in 乾燥 (dry) but stays in the name 乾隆
    assert SIMPLIFIED.convert("乾燥") == "干燥" and SIMPLIFIED.convert("乾隆") == "乾隆"


@pytest.mark.parametrize("text", ["open the window", "", "123 ABC", "ありがとう"])
def test_text_without_ideographs_is_returned_as_is(text: str) -> None:
    assert SIMPLIFIED.convert(text) is text and TRADITIONAL.convert(text) is text


def test_as_is_has_no_converter() -> None:
    with pytest.raises(ValueError, match="no conversion"):
        OpenCCConverter(ScriptMode.AS_IS)


def test_threads_share_the_converters() -> None:
    texts = ["头发", "发展", "打开车门", "乾燥"] * 50
    expected = [TRADITIONAL.convert(text) for text in texts]
    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(OpenCCConverter(ScriptMode.TRADITIONAL).convert, texts)) == expected
