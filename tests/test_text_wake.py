"""Wake phrases: tokens, matching by sound, stripping, settings, hotwords, the measured fixtures."""

from __future__ import annotations

from typing import NamedTuple

import pytest
from pydantic import ValidationError

from kitt_stt.hotwords import DEFAULT_BOOST, Hotword
from kitt_stt.text.tokens import fold, tokenize, word_key
from kitt_stt.text.wake import (
    MAX_REPEATS,
    PinyinWakeDetector,
    WakeMatchParams,
    WakeMode,
    WakeSettings,
    wake_hotwords,
)
from utils.performance.wake_thresholds import PHRASES, evaluate, load_cases


def detector(*phrases: str, **params: float) -> PinyinWakeDetector:
    return PinyinWakeDetector(WakeSettings(phrases=phrases, mode=WakeMode.DETECT, match=WakeMatchParams(**params)))


KAI = detector("你好小凯", "小凯", "hey kitt")


# ----- tokens -----


def test_tokens_are_toneless_pinyin_and_lower_case_words_with_their_spans() -> None:
    text = "你好小凯, Hey Kitt!"
    tokens = tokenize(text)
    assert [token.key for token in tokens] == ["li", "hao", "xiao", "kai", "hey", "kit"]  # n folded to l, tt to t
    assert [text[token.start:token.end] for token in tokens] == ["你", "好", "小", "凯", "Hey", "Kitt"]
    assert [token.han for token in tokens] == [True] * 4 + [False] * 2


def test_a_character_reads_the_same_in_any_context_and_folding_can_be_off() -> None:
    keys = [token.key for token in tokenize("重新重庆", fuzzy=False)]
    assert keys[0] == keys[2] == "zhong"  # one reading per character: a phrase and what was heard read alike
    assert [token.key for token in tokenize("长大", fuzzy=False)] == ["zhang", "da"]
    assert [token.key for token in tokenize("长大")] == ["zan", "da"]


def test_folding_merges_the_accent_confusions() -> None:
    assert fold("zhang") == fold("zan") == "zan"
    assert fold("shi") == "si" and fold("chi") == "ci"
    assert fold("nan") == fold("lang") == "lan"
    assert fold("xing") == fold("xin") and fold("xiang") == fold("xian")
    assert fold("kai") == "kai" and fold("gong") == "gong"


def test_word_keys_ignore_case_apostrophes_and_doubled_letters_but_not_digits() -> None:
    assert word_key("Kitt") == word_key("KIT") == "kit"
    assert word_key("it's") == "its"
    assert word_key("100") == "100" != word_key("10")


def test_tokenize_stops_at_the_limit_and_starts_where_asked() -> None:
    text = "打开车门打开车窗"
    assert [token.start for token in tokenize(text, 2, limit=3)] == [2, 3, 4]
    assert tokenize("！？ …") == []


# ----- matching and stripping -----


@pytest.mark.parametrize(("text", "phrase", "heard", "rest"), [
    ("你好小凯打开车门", "你好小凯", "你好小凯", "打开车门"),
    ("你好小凯，打开车门。", "你好小凯", "你好小凯", "打开车门。"),
    ("你好小开打开车窗", "你好小凯", "你好小开", "打开车窗"),  # homophone, another tone
    ("你好晓凯导航回家", "你好小凯", "你好晓凯", "导航回家"),
    ("你好小楷播放音乐", "你好小凯", "你好小楷", "播放音乐"),
    ("你好小凱打開車門", "你好小凯", "你好小凱", "打開車門"),  # traditional, as Whisper writes it
    ("你好凯打开车门", "你好小凯", "你好凯", "打开车门"),  # a character missing
    ("你好呀小凯打开车门", "你好小凯", "你好呀小凯", "打开车门"),  # one extra
    ("你好小小凯打开车门", "你好小凯", "你好小小凯", "打开车门"),  # one doubled: not the end of the match
    ("hey kitt, open the window", "hey kitt", "hey kitt", "open the window"),
    ("Hey Kit. Open the window.", "hey kitt", "Hey Kit", "Open the window."),
    ("HEY KITT OPEN THE TRUNK", "hey kitt", "HEY KITT", "OPEN THE TRUNK"),
    ("Hey Kid, turn on the AC.", "hey kitt", "Hey Kid", "turn on the AC."),
    ("“Hey kitt” — open it", "hey kitt", "Hey kitt", "open it"),
])
def test_a_wake_phrase_is_found_by_sound_and_cut_off_with_the_punctuation_after_it(
        text: str, phrase: str, heard: str, rest: str) -> None:
    match = KAI.detect(text)
    assert match is not None and (match.phrase, match.heard, match.rest) == (phrase, heard, rest)
    assert match.repeats == 1 and not match.alone


def test_exact_and_homophone_matches_score_one_and_near_ones_less() -> None:
    exact, homophone, near = KAI.detect("你好小凯打开"), KAI.detect("你好晓开打开"), KAI.detect("hey kid open")
    assert exact is not None and homophone is not None and near is not None
    assert exact.score == homophone.score == 1.0
    assert near.score == pytest.approx(1 - (1 / 3) / 2, abs=1e-3)  # kit/kid: one letter of three, one word of two


@pytest.mark.parametrize(("text", "heard", "rest", "repeats"), [
    ("小凯小凯打开车门", "小凯小凯", "打开车门", 2),
    ("你好小凯，小凯，导航回家", "你好小凯，小凯", "导航回家", 2),
    ("hey kitt hey kitt open the window", "hey kitt hey kitt", "open the window", 2),
    ("Hey Kit! Hey Kit! Call mom.", "Hey Kit! Hey Kit", "Call mom.", 2),
])
def test_repeated_wake_phrases_are_all_stripped(text: str, heard: str, rest: str, repeats: int) -> None:
    match = KAI.detect(text)
    assert match is not None and (match.heard, match.rest, match.repeats) == (heard, rest, repeats)


def test_repeats_are_capped() -> None:
    match = KAI.detect("小凯" * (MAX_REPEATS + 2) + "打开车门")
    assert match is not None and match.repeats == MAX_REPEATS and match.rest == "小凯小凯打开车门"


@pytest.mark.parametrize("text", ["你好小凯", "你好小凯。", "Hey Kitt!", "小凯小凯"])
def test_the_wake_phrase_alone(text: str) -> None:
    match = KAI.detect(text)
    assert match is not None and match.alone and match.rest == ""


@pytest.mark.parametrize("text", [
    "我跟小凯说了明天去",  # the name mid-sentence
    "明天带小凯去公园",
    "打开车门",
    "你好",
    "你好小姐请问怎么走",  # 你好小… without the 凯
    "你好小朋友",
    "小孩睡着了",  # one near syllable is half of a two-syllable phrase
    "open the window, hey kitt",  # not at the start
    "hey kids, stop fighting",
    "hey, can you pass me the water",
    "",
    "。。。",
])
def test_text_not_starting_with_a_wake_phrase_does_not_match(text: str) -> None:
    assert KAI.detect(text) is None


def test_tone_language_wake_phrase_is_exact() -> None:
    tone = detector("ABC")
    match = tone.detect("ABC打开车门")
    assert match is not None and (match.heard, match.rest, match.score) == ("ABC", "打开车门", 1.0)
    glued = tone.detect("ABCABC打开车门")  # the tone model writes no space between repeats
    assert glued is not None and (glued.heard, glued.rest, glued.repeats) == ("ABCABC", "打开车门", 2)
    assert tone.detect("ABD打开车门") is None
    assert tone.detect("打开车门ABC") is None
    alone = tone.detect("ABC")
    assert alone is not None and alone.alone


def test_ties_go_to_the_first_configured_phrase_and_the_best_score_wins() -> None:
    both = detector("hey kitt", "hey kit")
    match = both.detect("hey kit open")
    assert match is not None and match.phrase == "hey kitt"  # both read "hey kit": a tie
    match = KAI.detect("你好小凯打开")
    assert match is not None and match.phrase == "你好小凯"  # 小凯 would need 你好 as extra syllables


def test_thresholds_decide() -> None:
    assert detector("hey kitt", min_score_latin=0.9).detect("hey kid open") is None
    assert detector("你好小凯", min_score_han=0.8).detect("你好凯打开车门") is None
    assert detector("小凯", min_score_han_short=0.8).detect("小孩睡着了") is not None
    assert detector("你好小凯", fuzzy_pinyin=False).detect("你好小凯打开") is not None


def test_the_match_must_end_on_the_phrase_end() -> None:
    # a 4-syllable phrase ending with a near syllable (kai/kan) matches; one whose last syllable
    # is nowhere near does not, however well the rest matches
    assert KAI.detect("你好小看打开") is not None
    assert detector("你好小凯", max_end_distance=0.0).detect("你好小看打开") is None


# ----- the measured fixtures: what the defaults get right and wrong (docs/text.md) -----


def test_the_fixtures_at_the_default_thresholds() -> None:
    outcome = evaluate(load_cases(), PHRASES, WakeMatchParams())
    assert [case.text for case in outcome.false_wakes] == ["Hey Kim, how was work?"]
    assert [case.text for case in outcome.missed] == [
        "hi kitt open the window", "a kitt open the window", "heykitt open the door"]
    assert [case.text for case in outcome.wrong_strip] == ["你好小凯儿打开车门"]


# ----- settings -----


def test_settings_defaults_and_coercion() -> None:
    settings = WakeSettings()
    assert (settings.phrases, settings.mode, settings.follow_up_ms) == ((), WakeMode.OFF, 8000)
    settings = WakeSettings.model_validate({"phrases": [" 你好小凯 ", "hey kitt"], "mode": "required"})
    assert settings.phrases == ("你好小凯", "hey kitt") and settings.mode is WakeMode.REQUIRED


class PydanticError(NamedTuple):
    """One error pydantic itself raises, named by its stable error type and location."""

    type: str
    loc: tuple[str, ...]


@pytest.mark.parametrize(("fields", "message"), [
    ({"phrases": ["x"] * 17, "mode": "detect"}, "at most 16"),
    ({"phrases": ["a" * 33], "mode": "detect"}, "1-32 characters"),
    ({"phrases": ["  "], "mode": "detect"}, "1-32 characters"),
    ({"phrases": ["hey\u202ekitt"], "mode": "detect"}, "control, format"),
    ({"phrases": ["hey\nkitt"], "mode": "detect"}, "control, format"),
    ({"phrases": ["！？…"], "mode": "detect"}, "no letter, digit or Chinese character"),
    ({"phrases": [], "mode": "required"}, "needs at least one phrase"),
    ({"phrases": ["小凯"], "mode": "sometimes"}, "'off', 'detect' or 'required'"),
    # pydantic's own checks: by their error type, not by pydantic's wording (which is pydantic's to change)
    ({"phrases": ["小凯"], "follow_up_ms": -1}, PydanticError("greater_than_equal", ("follow_up_ms",))),
    ({"phrases": ["小凯"], "match": {"min_score_han": 1.5}},
     PydanticError("less_than_equal", ("match", "min_score_han"))),
    ({"phrases": ["小凯"], "colour": "red"}, PydanticError("extra_forbidden", ("colour",))),
])
def test_settings_are_validated(fields: dict[str, object], message: str | PydanticError) -> None:
    with pytest.raises(ValidationError, match=None if isinstance(message, PydanticError) else message) as raised:
        WakeSettings.model_validate(fields)
    if isinstance(message, PydanticError):
        assert [(error["type"], error["loc"]) for error in raised.value.errors()] == [(message.type, message.loc)]


def test_a_phrase_of_32_characters_and_16_phrases_are_accepted() -> None:
    settings = WakeSettings(phrases=tuple(f"{index:02d}" + "凯" * 30 for index in range(16)), mode=WakeMode.DETECT)
    assert len(settings.phrases) == 16 and all(len(phrase) == 32 for phrase in settings.phrases)


# ----- hotwords -----


def test_wake_phrases_are_added_to_the_hotwords_once() -> None:
    settings = WakeSettings(phrases=("你好小凯", "hey kitt", "你好小凯"), mode=WakeMode.DETECT)
    own = (Hotword("空调", 2.0), Hotword("hey kitt", 3.0))
    assert wake_hotwords(settings, own) == (*own, Hotword("你好小凯", DEFAULT_BOOST))
    assert wake_hotwords(settings) == (Hotword("你好小凯", DEFAULT_BOOST), Hotword("hey kitt", DEFAULT_BOOST))
    off = WakeSettings(phrases=("你好小凯",), mode=WakeMode.OFF)
    assert wake_hotwords(off, own) == own
