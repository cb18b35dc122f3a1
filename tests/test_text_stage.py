"""The text stage as the pipeline will call it: interims, finals, commits, and the turn's wake gate."""

from __future__ import annotations

from kitt_stt.pipeline.text_join import join_texts
from kitt_stt.text.gate import TurnAction, WakeGate
from kitt_stt.text.script import ScriptMode
from kitt_stt.text.stage import StagedText, TextSettings, TextStage
from kitt_stt.text.wake import WakeMatch, WakeMode, WakeSettings

WAKE = WakeSettings(phrases=("你好小凯", "hey kitt"), mode=WakeMode.DETECT)
REQUIRED = WakeSettings(phrases=("你好小凯", "hey kitt"), mode=WakeMode.REQUIRED, follow_up_ms=8000)
STAGE = TextStage(TextSettings(), WAKE)


def test_interims_get_script_and_wake_but_no_itn() -> None:
    staged = STAGE.interim("你好小凱，調到二十六度", "zh")
    assert staged.text == "调到二十六度"
    assert staged.wake is not None and (staged.wake.phrase, staged.wake.heard) == ("你好小凯", "你好小凯")


def test_finals_get_every_step() -> None:
    staged = STAGE.final("你好小凱，調到二十六度", "zh")
    assert staged.text == "调到26度"
    assert staged.wake is not None and staged.wake.heard == "你好小凯" and staged.wake.rest == "调到26度"
    english = STAGE.final("Hey Kitt, set the temperature to twenty six degrees.", "en")
    assert english.text == "set the temperature to 26 degrees."
    assert english.wake is not None and english.wake.heard == "Hey Kitt"


def test_itn_is_skipped_where_the_engine_did_it_or_the_session_turned_it_off() -> None:
    assert STAGE.final("调到二十六度", "zh", engine_itn=True).text == "调到二十六度"
    assert TextStage(TextSettings(itn=False), WAKE).final("调到二十六度", "zh").text == "调到二十六度"
    assert STAGE.final("调到二十六度", "ja").text == "调到二十六度"  # no grammar for the language reported


def test_script_modes() -> None:
    traditional = TextStage(TextSettings(script=ScriptMode.TRADITIONAL), WAKE)
    staged = traditional.final("你好小凯，把空调调到二十六度", "zh")  # ITN reads simplified, then back
    assert staged.text == "把空調調到26度"
    assert staged.wake is not None and staged.wake.heard == "你好小凱"
    assert traditional.interim("打开车门", "zh").text == "打開車門"
    as_is = TextStage(TextSettings(script=ScriptMode.AS_IS), WAKE)
    assert as_is.final("大開車門", "zh").text == "大開車門"
    assert STAGE.final("車門を開けて", "ja").text == "車門を開けて"  # Japanese kanji stay


def test_wake_off_leaves_the_phrase_in_the_text() -> None:
    off = TextStage()
    staged = off.final("你好小凯打开车门", "zh")
    assert staged == StagedText("你好小凯打开车门")


def test_a_commit_is_the_final_step_over_the_turns_joined_raw_texts() -> None:
    # the wake phrase in one segment, the command in the next, and a number cut by a pause
    raw = ["你好小凯", "空调调到二十", "六度"]
    segment_finals = [STAGE.final(text, "zh") for text in raw]
    assert [staged.text for staged in segment_finals] == ["", "空调调到20", "六度"]  # a lone digit stays
    commit = STAGE.final(join_texts(raw), "zh")
    assert commit.text == "空调调到26度" and commit.wake is not None and commit.wake.phrase == "你好小凯"


def staged(text: str, phrase: str | None = None) -> StagedText:
    return StagedText(text, None if phrase is None else WakeMatch(phrase, phrase, text, 1.0))


def test_gate_off_means_no_wake_metadata() -> None:
    assert WakeGate().decide(WakeSettings(), staged("打开车门"), 0, 1000) is None


def test_gate_detect_commits_every_turn_with_what_it_found() -> None:
    gate = WakeGate()
    woken = gate.decide(WAKE, staged("打开车门", "你好小凯"), 0, 1000)
    assert woken is not None and woken.action is TurnAction.COMMIT
    assert woken.metadata() == {"woken": True, "phrase": "你好小凯", "follow_up": False}
    follow = gate.decide(WAKE, staged("再开大一点"), 5000, 6000)  # within 8000 ms of a woken commit
    assert follow is not None and follow.metadata() == {"woken": True, "phrase": "你好小凯", "follow_up": True}
    plain = gate.decide(WAKE, staged("打开车门"), 14_001, 15_000)  # the window ended at 6000 + 8000
    assert plain is not None and plain.action is TurnAction.COMMIT and not plain.woken


def test_gate_required_filters_turns_not_addressed_to_the_assistant() -> None:
    decision = WakeGate().decide(REQUIRED, staged("我们先去吃饭吧"), 0, 1000)
    assert decision is not None and decision.action is TurnAction.FILTER


def test_a_wake_only_turn_opens_a_follow_up_window_for_the_next_turn() -> None:
    gate = WakeGate()
    alone = gate.decide(REQUIRED, staged("", "你好小凯"), 0, 1000)
    assert alone is not None and alone.action is TurnAction.WAKE_ONLY and alone.woken
    follow = gate.decide(REQUIRED, staged("打开车门"), 9000, 10_000)  # 8000 ms after the end: inside
    assert follow is not None and follow.action is TurnAction.COMMIT
    assert follow.metadata() == {"woken": True, "phrase": "你好小凯", "follow_up": True}
    more = gate.decide(REQUIRED, staged("关闭车窗"), 11_000, 12_000)  # a woken commit reopens the window
    assert more is not None and more.action is TurnAction.COMMIT and more.follow_up
    after = gate.decide(REQUIRED, staged("播放音乐"), 20_001, 21_000)  # 12_000 + 8000 has passed
    assert after is not None and after.action is TurnAction.FILTER


def test_the_follow_up_window_closes_after_follow_up_ms() -> None:
    gate = WakeGate()
    gate.decide(REQUIRED, staged("", "你好小凯"), 0, 1000)
    late = gate.decide(REQUIRED, staged("打开车门"), 9001, 10_000)
    assert late is not None and late.action is TurnAction.FILTER and not late.follow_up


def test_a_turn_with_its_own_wake_phrase_is_no_follow_up() -> None:
    """``follow_up`` means "committed without a wake phrase because of the window"."""
    gate = WakeGate()
    gate.decide(REQUIRED, staged("", "hey kitt"), 0, 1000)
    again = gate.decide(REQUIRED, staged("open the window", "hey kitt"), 2000, 3000)
    assert again is not None and again.metadata() == {"woken": True, "phrase": "hey kitt", "follow_up": False}


def test_wake_phrases_join_the_sessions_hotwords_unless_named() -> None:
    from kitt_stt.hotwords import Hotword
    from kitt_stt.pipeline.settings import SessionSettings

    wake = WakeSettings(phrases=("你好小凯", "hey kitt"), mode=WakeMode.DETECT)
    settings = SessionSettings(hotwords=(Hotword("hey kitt", 3.0),), stage=TextStage(wake=wake))
    assert [(h.text, h.boost) for h in settings.decode_options().hotwords] == [("hey kitt", 3.0), ("你好小凯", 1.5)]
    assert SessionSettings(hotwords=(Hotword("x", 2.0),)).decode_options().hotwords == (Hotword("x", 2.0),)
