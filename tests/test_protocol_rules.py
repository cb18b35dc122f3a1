"""Protocol rules of docs/protocol.md, unit by unit: ping ids echoed exactly, how texts are
joined, which characters seat names and client ids refuse, how a hotword with a colon is written."""

from __future__ import annotations

import math
from typing import Any

import msgpack
import msgpack.fallback
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kitt_stt.hotwords import Hotword, parse_hotword
from kitt_stt.pipeline.text_join import join_texts
from kitt_stt.protocol.codec import decode_client_frame, encode_server_frame
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.protocol.frames import AudioFrame, PingFrame, PongFrame, StartFrame

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


def packed(frame: object) -> bytes:
    return msgpack.packb(frame, use_bin_type=True)


def pong_for(ping_id: Any) -> Any:
    """Send ``ping_id`` through the decoder and the pong back through the encoder, as the server does."""
    frame = decode_client_frame(packed({"type": "ping", "id": ping_id}))
    assert isinstance(frame, PingFrame)
    pong = msgpack.unpackb(encode_server_frame(PongFrame(id=frame.id)), raw=False)
    assert pong["type"] == "pong"
    return pong["id"]


def refused(payload: bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as caught:
        decode_client_frame(payload)
    return caught.value


# ----- ping ids ---------------------------------------------------------------------------------

PING_IDS = [
    pytest.param(7, id="int"),
    pytest.param(2**64 - 1, id="uint64-max"),
    pytest.param(-(2**63), id="int64-min"),
    pytest.param("abc", id="str"),
    pytest.param(b"\x00\xff\xfe", id="bin-not-utf8"),
    pytest.param(b"ab", id="bin-utf8"),
    pytest.param(None, id="nil"),
    pytest.param(True, id="bool"),
    pytest.param(2.5, id="float"),
    pytest.param([1, "a", b"\xff", None, [b"x", {"k": b"v"}]], id="nested-list"),
    pytest.param({"n": {"deep": [b"\x80", 1.5, False]}, "s": "x"}, id="nested-map"),
    pytest.param({b"\x01": "bin key"}, id="bin-map-key"),
]


@pytest.mark.parametrize("ping_id", PING_IDS)
def test_pong_echoes_the_id_with_its_msgpack_types(ping_id: Any) -> None:
    """Equal and packed the same: bytes stay msgpack bin (a str would pack differently)."""
    echoed = pong_for(ping_id)
    assert echoed == ping_id
    assert packed(echoed) == packed(ping_id)


def test_pong_keeps_nan_and_infinities() -> None:
    """JSON-mode dumping turned NaN and infinities into null."""
    echoed = pong_for([math.nan, math.inf, -math.inf])
    assert math.isnan(echoed[0]) and echoed[1:] == [math.inf, -math.inf]


id_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**63), max_value=2**64 - 1),
              st.floats(allow_nan=True), st.text(max_size=20), st.binary(max_size=40)),
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.one_of(st.text(max_size=8), st.binary(max_size=8)), inner, max_size=4)),
    max_leaves=12,
)


@settings(max_examples=300, deadline=None)
@given(id_values)
def test_any_msgpack_id_comes_back_packed_identically(ping_id: Any) -> None:
    assert packed(pong_for(ping_id)) == packed(ping_id)


def test_an_id_msgpack_cannot_pack_back_is_a_bad_field(monkeypatch: pytest.MonkeyPatch) -> None:
    """The unpacker accepts ~1000 nesting levels; the pure-Python packer (here) runs out of Python
    stack before that, older msgpack releases stop at 511.  Such an id must be refused when
    decoded, not fail later while the server encodes the pong."""
    monkeypatch.setattr(msgpack, "packb", lambda value, **options: msgpack.fallback.Packer(**options).pack(value))
    deep = b"\x82\xa4type\xa4ping\xa2id" + b"\x91" * 1000 + b"\xc0"
    error = refused(deep)
    assert error.code is ErrorCode.BAD_FIELD and "id" in error.message


# ----- joining texts ----------------------------------------------------------------------------

JOINS = [
    # scripts written with spaces: one space between parts
    (["open the", "door"], "open the door"),
    (["Открой", "дверь"], "Открой дверь"),
    (["Άνοιξε", "την πόρτα"], "Άνοιξε την πόρτα"),
    (["문을", "열어 줘"], "문을 열어 줘"),
    (["افتح", "الباب"], "افتح الباب"),
    (["set it to", "22"], "set it to 22"),
    (["12", "30"], "12 30"),
    # after sentence punctuation
    (["Open the door, please.", "Now"], "Open the door, please. Now"),
    (["Stop!", "Go"], "Stop! Go"),
    (["Where?", "Here"], "Where? Here"),
    (["문을 열까요?", "네"], "문을 열까요? 네"),
    # scripts written without spaces, on either side
    (["打开", "车门"], "打开车门"),
    (["車門を", "開けて"], "車門を開けて"),
    (["ドア", "オープン"], "ドアオープン"),
    (["เปิด", "ประตู"], "เปิดประตู"),
    (["打开", "GPS", "导航"], "打开GPS导航"),
    (["GPS", "打开"], "GPS打开"),
    (["温度", "22"], "温度22"),
    (["문을", "打开"], "문을打开"),
    # CJK and fullwidth punctuation
    (["打开车门。", "Open it"], "打开车门。Open it"),
    (["好的，", "OK"], "好的，OK"),
    (["OK", "，好的"], "OK，好的"),
    (["Ｗｉ－Ｆｉ", "on"], "Ｗｉ－Ｆｉon"),
    # closing and opening punctuation
    (["Open", ", now"], "Open, now"),
    (["Open", "."], "Open."),
    (["(", "see", "50", "%)"], "(see 50%)"),
    (["¿Qué", "hora es?"], "¿Qué hora es?"),
    (["«", "Bonjour", "»"], "«Bonjour»"),
    # trimming and empty parts
    (["", "门", "", "AB"], "门AB"),
    ([" open ", "  door "], "open door"),
    (["", "  "], ""),
    ([], ""),
]


@pytest.mark.parametrize(("parts", "joined"), JOINS, ids=[" + ".join(parts) or "nothing" for parts, _ in JOINS])
def test_join_texts(parts: list[str], joined: str) -> None:
    assert join_texts(parts) == joined


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=12), max_size=5))
def test_join_adds_at_most_one_space_per_join(parts: list[str]) -> None:
    """The join only trims and inserts single spaces: the non-space content is kept in order."""
    joined = join_texts(parts)
    kept = [part.strip() for part in parts if part.strip()]
    assert joined.replace(" ", "") == "".join(kept).replace(" ", "")
    assert len(joined) <= len("".join(kept)) + max(len(kept) - 1, 0)


# ----- seat names and client ids ----------------------------------------------------------------

UNPRINTABLE = [
    pytest.param("\u202e", id="U+202E-right-to-left-override"),
    pytest.param("\u202a", id="U+202A-left-to-right-embedding"),
    pytest.param("\u2066", id="U+2066-left-to-right-isolate"),
    pytest.param("\u2069", id="U+2069-pop-directional-isolate"),
    pytest.param("\u200e", id="U+200E-left-to-right-mark"),
    pytest.param("\u200f", id="U+200F-right-to-left-mark"),
    pytest.param("\u061c", id="U+061C-arabic-letter-mark"),
    pytest.param("\u200b", id="U+200B-zero-width-space"),
    pytest.param("\u200d", id="U+200D-zero-width-joiner"),
    pytest.param("\ufeff", id="U+FEFF-zero-width-no-break-space"),
    pytest.param("\U000e0041", id="U+E0041-tag"),
    pytest.param("\x00", id="U+0000-nul"),
    pytest.param("\x1b", id="U+001B-escape"),
    pytest.param("\x7f", id="U+007F-delete"),
    pytest.param("\x85", id="U+0085-next-line"),
    pytest.param("\u2028", id="U+2028-line-separator"),
    pytest.param("\u2029", id="U+2029-paragraph-separator"),
    pytest.param("\ue000", id="U+E000-private-use"),
    pytest.param("\ufffe", id="U+FFFE-noncharacter"),
]

SEAT_FRAMES = [
    pytest.param(lambda seat: {"type": "audio", "seat": seat, "pcm": b""}, id="audio"),
    pytest.param(lambda seat: {"type": "vad", "seat": seat, "event": "start"}, id="vad"),
    pytest.param(lambda seat: {"type": "finalize", "seat": seat}, id="finalize"),
    pytest.param(lambda seat: {"type": "start", "seats": ["driver", seat]}, id="start-seats"),
]


@pytest.mark.parametrize("char", UNPRINTABLE)
@pytest.mark.parametrize("frame_of", SEAT_FRAMES)
def test_seat_with_unprintable_character_is_a_bad_field(frame_of, char: str) -> None:
    error = refused(packed(frame_of(f"dri{char}ver")))
    assert error.code is ErrorCode.BAD_FIELD
    assert f"U+{ord(char):04X}" in error.message and char not in error.message


@pytest.mark.parametrize("char", UNPRINTABLE)
def test_client_with_unprintable_character_is_a_bad_field(char: str) -> None:
    error = refused(packed({"type": "start", "client": f"car{char}7"}))
    assert error.code is ErrorCode.BAD_FIELD and "client" in error.message


PRINTABLE_NAMES = ["driver", "主驾", "rear left", "後部座席 左", "سائق", "водитель", "🚗", "x" * 64, "a\u00a0b"]


@pytest.mark.parametrize("name", PRINTABLE_NAMES)
def test_printable_names_are_accepted(name: str) -> None:
    frame = decode_client_frame(packed({"type": "start", "seats": [name], "client": name}))
    assert isinstance(frame, StartFrame) and frame.seats == [name] and frame.client == name
    audio = decode_client_frame(packed({"type": "audio", "seat": name, "pcm": b""}))
    assert isinstance(audio, AudioFrame) and audio.seat == name


@pytest.mark.parametrize("seat", ["", "x" * 65])
def test_seat_length_is_still_1_to_64(seat: str) -> None:
    assert refused(packed({"type": "audio", "seat": seat, "pcm": b""})).code is ErrorCode.BAD_FIELD


# ----- hotwords with a colon --------------------------------------------------------------------

HOTWORDS = [
    ("打开车门", Hotword("打开车门", 1.5)),
    ("打开车门:5", Hotword("打开车门", 5.0)),
    ("12:30:1.5", Hotword("12:30", 1.5)),
    ("ratio:high:2", Hotword("ratio:high", 2.0)),
    ("a:b:c:20", Hotword("a:b:c", 20.0)),
]


@pytest.mark.parametrize(("entry", "hotword"), HOTWORDS)
def test_hotword_boost_follows_the_last_colon(entry: str, hotword: Hotword) -> None:
    assert parse_hotword(entry) == hotword


@pytest.mark.parametrize(("entry", "explicit"), [
    ("12:30", "'12:30:1.5'"),        # 30 is a number, but out of (0, 20]
    ("ratio:high", "'ratio:high:1.5'"),  # not a number at all: still refused, never guessed
    ("x:notanumber", "'x:notanumber:1.5'"),
    ("10:0", "'10:0:1.5'"),
])
def test_bad_boost_says_how_to_write_a_hotword_with_a_colon(entry: str, explicit: str) -> None:
    with pytest.raises(ValueError, match="explicit boost") as caught:
        parse_hotword(entry)
    assert explicit in str(caught.value)


def test_an_invalid_seat_name_is_not_echoed_in_the_error() -> None:
    for seat, echoed in (("rear\u202eleft", None), ("x" * 65, None), ("主驾", "主驾")):
        payload = msgpack.packb({"type": "audio", "seat": seat, "pcm": "not bytes"}, use_bin_type=True)
        with pytest.raises(ProtocolError) as refused:
            decode_client_frame(payload)
        assert refused.value.seat == echoed


@pytest.mark.parametrize("invisible", ["\u034f", "\ufe0f", "\u3164", "\u115f", "\u2800", "\U000e0100"])
def test_invisible_letters_and_marks_are_refused_in_names(invisible: str) -> None:
    payload = msgpack.packb({"type": "audio", "seat": f"driver{invisible}", "pcm": b""}, use_bin_type=True)
    with pytest.raises(ProtocolError) as refused:
        decode_client_frame(payload)
    assert refused.value.code is ErrorCode.BAD_FIELD and f"U+{ord(invisible):04X}" in refused.value.message


def test_a_ping_id_is_bounded_in_size() -> None:
    ok = msgpack.packb({"type": "ping", "id": b"x" * 1000}, use_bin_type=True)
    assert decode_client_frame(ok).id == b"x" * 1000  # type: ignore[attr-defined]
    big = msgpack.packb({"type": "ping", "id": b"x" * 2000}, use_bin_type=True)
    with pytest.raises(ProtocolError) as refused:
        decode_client_frame(big)
    assert refused.value.code is ErrorCode.BAD_FIELD and "at most 1024" in refused.value.message
