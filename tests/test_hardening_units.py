"""Issue 19 in isolation: failures of background work are logged with their session and seat, the
outbox's limits, quoting of client text, hotword tokenising (same tokens, bounded cost) and the
quantiser's root-logger chatter silenced."""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path

import pytest

from kitt_stt.asr.ctc import PieceIndex, tokenize_hotword
from kitt_stt.audio.vad import EndReason
from kitt_stt.config.schema import AppConfig
from kitt_stt.config.server_config import HotwordChangeBudget
from kitt_stt.hotwords import Hotword, parse_hotword
from kitt_stt.logs import root_info_silenced
from kitt_stt.protocol.errors import ErrorCode, ProtocolError
from kitt_stt.quote import quoted
from kitt_stt.server.app import create_app
from kitt_stt.server.connection import Connection
from kitt_stt.server.failures import flush_all
from kitt_stt.server.hotword_changes import HotwordChanges
from kitt_stt.server.outbox import Outbox, OutboxLimits, Outgoing, Overflow
from tests.test_connection_lifecycle import FakeSocket, RecordingEngine

# ----- no failure vanishes ----------------------------------------------------------------------------


class FailingSeat:
    def __init__(self, seat: str, fail: bool) -> None:
        self.seat = seat
        self._fail = fail

    def flush(self, reason: EndReason) -> asyncio.Task[None]:
        async def commit() -> None:
            await asyncio.sleep(0)
            if self._fail:
                raise RuntimeError(f"commit of {self.seat} broke")

        return asyncio.get_running_loop().create_task(commit())


async def test_a_failed_flush_is_logged_once_with_its_seat(caplog: pytest.LogCaptureFixture) -> None:
    seats = [FailingSeat("driver", fail=False), FailingSeat("rear left", fail=True)]
    with caplog.at_level(logging.ERROR, logger="kitt_stt.server.failures"):
        await flush_all(seats, EndReason.STOP, "abc123")
    failures = [r for r in caplog.records if "flush" in r.getMessage()]
    assert len(failures) == 1
    assert "session abc123 seat rear left" in failures[0].getMessage()
    assert failures[0].exc_info is not None and "commit of rear left broke" in str(failures[0].exc_info[1])


async def test_a_failed_session_drain_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    state = create_app(AppConfig.model_validate({"turn": {"model": None}}), RecordingEngine()).state.service

    class Broken:
        session_id = "feedbeef"

        async def shutdown(self) -> None:
            raise RuntimeError("flush exploded")

    class Fine:
        session_id = "0k"

        async def shutdown(self) -> None:
            await asyncio.sleep(0)

    state.connections.update({Broken(), Fine()})  # type: ignore[arg-type]
    with caplog.at_level(logging.ERROR, logger="kitt_stt.server.state"):
        await state.drain(5.0)
    failures = [r for r in caplog.records if "drain failed" in r.getMessage()]
    assert [r.getMessage() for r in failures] == ["session feedbeef: drain failed"]
    assert "flush exploded" in str(failures[0].exc_info[1])  # type: ignore[index]


async def test_a_send_that_fails_oddly_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    outbox = Outbox(OutboxLimits(10, 1 << 20, 5.0), lambda reason, dropped: None)

    async def send(item: Outgoing) -> None:
        raise RuntimeError('Cannot call "send" once a close message has been sent.')

    outbox.put(Outgoing(b"x", "final", "driver"))
    with caplog.at_level(logging.WARNING, logger="kitt_stt.server.outbox"):
        await asyncio.wait_for(outbox.run(send), 5)
    assert [r.getMessage() for r in caplog.records] == [
        'sending a final frame (seat driver) failed: Cannot call "send" once a close message has been sent.']


async def test_a_receive_that_fails_oddly_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    class OddSocket(FakeSocket):
        async def receive(self) -> dict:
            raise RuntimeError('Cannot call "receive" once a disconnect message has been received.')

    state = create_app(AppConfig.model_validate({"turn": {"model": None}}), RecordingEngine()).state.service
    connection = Connection(OddSocket(), state)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="kitt_stt.server.connection"):
        await asyncio.wait_for(connection.serve(), 10)
    assert any("receiving failed: Cannot call" in r.getMessage() for r in caplog.records), caplog.text


# ----- the outbox ---------------------------------------------------------------------------------------


def test_the_outbox_overflows_once_at_its_byte_cap_and_drops_what_it_held() -> None:
    overflows: list[tuple[Overflow, int]] = []
    outbox = Outbox(OutboxLimits(max_frames=100, max_bytes=1000, stall_s=1.0),
                    lambda reason, dropped: overflows.append((reason, dropped)))
    assert all(outbox.put(Outgoing(b"x" * 300, "pong", None)) for _ in range(3))
    assert not outbox.put(Outgoing(b"x" * 300, "pong", None))  # 1200 > 1000
    assert not outbox.put(Outgoing(b"y", "pong", None))  # refused after the overflow, not reported again
    assert overflows == [(Overflow.BYTES, 900)] and outbox.bytes == 0
    outbox.put_last(Outgoing(b"farewell", "error", None))  # the fatal error still goes
    assert outbox.bytes == len(b"farewell")


def test_the_outbox_overflows_at_its_frame_cap() -> None:
    overflows: list[Overflow] = []
    outbox = Outbox(OutboxLimits(max_frames=2, max_bytes=1 << 20, stall_s=1.0),
                    lambda reason, dropped: overflows.append(reason))
    for _ in range(3):
        outbox.put(Outgoing(b"x", "pong", None))
    assert overflows == [Overflow.FRAMES]


async def test_a_send_that_stalls_overflows_the_outbox_and_ends_the_sender() -> None:
    overflows: list[Overflow] = []
    outbox = Outbox(OutboxLimits(max_frames=100, max_bytes=1 << 20, stall_s=0.1),
                    lambda reason, dropped: overflows.append(reason))
    sent: list[bytes] = []

    async def never_drains(item: Outgoing) -> None:
        await asyncio.sleep(60)
        sent.append(item.payload)

    for _ in range(5):
        outbox.put(Outgoing(b"x", "pong", None))
    outbox.put_last(Outgoing(b"bye", "error", None))  # queued and ended before the stall...
    await asyncio.wait_for(outbox.run(never_drains), 5)  # ...which drops it with the rest; the end stays
    assert overflows == [Overflow.STALL] and sent == []


# ----- client text quoted briefly -------------------------------------------------------------------------


def test_quoted_shows_at_most_64_characters() -> None:
    assert quoted("短い") == "'短い'"
    long = "x" * 60000
    assert quoted(long) == repr("x" * 64) + "… (60000 characters)"
    with pytest.raises(ValueError) as refused:
        parse_hotword("a:" + long)
    message = str(refused.value)  # quoted once, cut, its length said; the hint does not repeat it
    assert len(message) < 300 and message.count("x" * 62) == 1 and "(60002 characters)" in message


def test_hotword_changes_are_budgeted_and_the_list_in_force_is_free() -> None:
    changes = HotwordChanges(HotwordChangeBudget(per_s=0.001, burst=2), ["a"], (Hotword("a"),), biased=True)
    assert changes.given(["a"]) is None  # the configured list as written: not parsed again
    assert not changes.charge((Hotword("a"),))  # the decode list in force: free
    for word in ("b", "c"):
        assert changes.given([word]) == [word] and changes.charge((Hotword(word),))
        changes.applied([word], (Hotword(word),))
    assert not changes.charge((Hotword("c"),))  # in force: free
    with pytest.raises(ProtocolError) as refused:
        changes.charge((Hotword("c"), Hotword("wake phrase")))  # a new wake phrase changes the decode list
    assert refused.value.code is ErrorCode.RATE_LIMITED and "server.hotword_changes" in refused.value.message


def test_a_hotword_change_costs_its_token_only_once_applied() -> None:
    """The token is taken when the frame's settings are in force: a frame refused after the
    budget check (its hotwords failed to prepare: ``bad_field``) costs nothing, as documented; it
    used to be charged before preparing."""
    changes = HotwordChanges(HotwordChangeBudget(per_s=0.001, burst=1), [], (), biased=True)
    for _ in range(3):  # checked, then refused elsewhere: never applied
        assert changes.charge((Hotword("b"),))
    changes.applied(["b"], (Hotword("b"),))  # the one token
    with pytest.raises(ProtocolError) as refused:
        changes.charge((Hotword("c"),))
    assert refused.value.code is ErrorCode.RATE_LIMITED


def test_hotword_changes_cost_nothing_on_an_engine_that_cannot_bias_decoding() -> None:
    """Nothing is built there (sherpa, Whisper), so there is nothing to budget."""
    changes = HotwordChanges(HotwordChangeBudget(per_s=0.001, burst=1), [], (), biased=False)
    for index in range(3):
        decoding = (Hotword(f"w{index}"),)
        assert not changes.charge(decoding)  # nothing to build, and never rate_limited
        changes.applied([f"w{index}"], decoding)


# ----- hotword tokenising -----------------------------------------------------------------------------------


def reference_tokenize(word: Hotword, vocabulary: dict[str, int]) -> list[int]:
    """The slice-by-slice longest match the engine used before (every length at every position)."""
    ids: list[int] = []
    for word_text in word.text.split():
        position, first = 0, True
        while position < len(word_text):
            match = None
            for end in range(len(word_text), position, -1):
                piece = word_text[position:end]
                for candidate in ((f"▁{piece}", piece) if first else (piece,)):
                    if candidate in vocabulary:
                        match = (vocabulary[candidate], end)
                        break
                if match:
                    break
            if match is None:
                position += 1
            else:
                ids.append(match[0])
                position = match[1]
            first = False
    return ids


def test_the_piece_index_tokenises_exactly_as_the_longest_match_did() -> None:
    rng = random.Random(19)
    letters = "abcde打开车"
    pieces = {"".join(rng.choice(letters) for _ in range(rng.randint(1, 5))) for _ in range(300)}
    vocabulary: dict[str, int] = {}
    for piece in sorted(pieces):
        vocabulary.setdefault(piece, len(vocabulary))
        if rng.random() < 0.4:
            vocabulary.setdefault("▁" + piece, len(vocabulary))
    index = PieceIndex(vocabulary)
    for _ in range(2000):
        words = " ".join("".join(rng.choice(letters + "xyz") for _ in range(rng.randint(1, 12)))
                         for _ in range(rng.randint(1, 3)))
        word = Hotword(words)
        assert tokenize_hotword(word, index) == reference_tokenize(word, vocabulary), words


# ----- the quantiser's INFO lines ---------------------------------------------------------------------------


def test_the_quantisers_root_logger_info_is_silenced(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    onnx = pytest.importorskip("onnx")
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    weights = numpy_helper.from_array(np.random.default_rng(0).random((64, 64), dtype=np.float32), "W")
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "W"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [weights])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), tmp_path / "m.onnx")

    def quantised_info(silenced: bool) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.INFO):
            if silenced:
                with root_info_silenced("onnxruntime.quantization"):
                    quantize_dynamic(tmp_path / "m.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8)
            else:
                quantize_dynamic(tmp_path / "m.onnx", tmp_path / "q.onnx", weight_type=QuantType.QInt8)
        return [r.getMessage() for r in caplog.records if r.levelno < logging.WARNING and r.name == "root"]

    assert quantised_info(silenced=False)  # the quantiser does talk on the root logger (the test means something)
    assert quantised_info(silenced=True) == []
    with caplog.at_level(logging.INFO):
        logging.getLogger().info("after the block, the root logger is as before")
    assert caplog.records[-1].getMessage() == "after the block, the root logger is as before"


def test_the_largest_trie_adds_almost_nothing_for_the_garbage_collector_to_walk() -> None:
    """64,000 nodes as objects were walked by every full collection (stalls of ~0.25 s under a
    hotword flood); as flat lists of untracked int dicts they are a handful of objects."""
    import gc

    from kitt_stt.asr.ctc import HotwordTrie

    rng = random.Random(3)
    entries = [([rng.randrange(5000) for _ in range(64)], 1.5) for _ in range(1000)]
    gc.collect()
    before = len(gc.get_objects())
    trie = HotwordTrie(entries)
    tracked = len(gc.get_objects()) - before
    assert len(trie.children) > 60_000 and tracked < 100, tracked
