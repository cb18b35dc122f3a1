"""What a broken or hostile client sends: malformed frames, each with the error code the protocol
(docs/protocol.md) promises for it, so a soak can check the server answers every one and goes on."""

from __future__ import annotations

import random

import msgpack


def fuzz_messages(rng: random.Random) -> list[tuple[str, bytes | str, str | None]]:
    """Malformed (and a few odd but valid) messages: ``(what, message, code it must be answered
    with, or None where the protocol does not say or the frame is valid)``.

    Each stays under ``server.max_message_bytes``: a bigger one is refused by the WebSocket layer
    with close 1009, which is documented and would end the connection this check keeps using."""

    def pack(value: object) -> bytes:
        return msgpack.packb(value, use_bin_type=True)

    silence = bytes(640)
    garbage = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 300)))
    return [
        ("random bytes", b"\xc1" + garbage, "bad_frame"),  # 0xc1 is never valid msgpack
        ("empty message", b"", "bad_frame"),
        ("truncated msgpack", pack({"type": "audio", "pcm": silence})[:-100], "bad_frame"),
        ("msgpack list", pack([1, 2, 3]), "bad_frame"),
        ("msgpack string", pack("audio"), "bad_frame"),
        ("msgpack int", pack(rng.randrange(-(2**31), 2**31)), "bad_frame"),
        ("msgpack nil", pack(None), "bad_frame"),
        ("map without type", pack({"seat": "driver"}), "bad_frame"),
        ("integer type", pack({"type": 7}), "bad_frame"),
        ("unknown type", pack({"type": "explode"}), "bad_frame"),
        ("type with a NUL", pack({"type": "audio\x00"}), "bad_frame"),
        ("pcm as a string", pack({"type": "audio", "seat": "fuzz", "pcm": "00" * 320}), "bad_field"),
        ("pcm missing", pack({"type": "audio", "seat": "fuzz"}), "bad_field"),
        ("seq as a string", pack({"type": "audio", "seat": "fuzz", "seq": "1", "pcm": silence}), "bad_field"),
        ("seq as a bool", pack({"type": "audio", "seat": "fuzz", "seq": True, "pcm": silence}), "bad_field"),
        ("unknown vad event", pack({"type": "vad", "seat": "fuzz", "event": "maybe"}), "bad_field"),
        ("vad event as int", pack({"type": "vad", "seat": "fuzz", "event": 1}), "bad_field"),
        ("interim as a string", pack({"type": "start", "interim": "yes"}), "bad_field"),
        ("hotwords as a string", pack({"type": "configure", "hotwords": "word"}), "bad_field"),
        ("seat as an int", pack({"type": "finalize", "seat": 5}), "bad_field"),
        ("pcm over max_frame_ms", pack({"type": "audio", "seat": "fuzz", "pcm": bytes(64_000)}), "bad_audio"),
        ("pcm not whole 10 ms", pack({"type": "audio", "seat": "fuzz", "pcm": bytes(321)}), "bad_audio"),
        ("8 kHz audio", pack({"type": "audio", "seat": "fuzz", "sample_rate": 8000, "pcm": silence}), "bad_audio"),
        ("text message", "hello", "bad_frame"),
        ("JSON as text", '{"type": "ping"}', "bad_frame"),
        ("seat of 65 chars", pack({"type": "vad", "seat": "s" * 65, "event": "start"}), "bad_field"),
        ("seat of 10000 CJK chars", pack({"type": "audio", "seat": "座" * 10_000, "pcm": silence}), "bad_field"),
        ("seat over msgpack's string limit", pack({"type": "vad", "seat": "x" * 70_000, "event": "stop"}),
         "bad_frame"),
        ("seat with a NUL", pack({"type": "vad", "seat": "dri\x00ver", "event": "start"}), "bad_field"),
        ("seat with an escape sequence", pack({"type": "finalize", "seat": "\x1b[2J"}), "bad_field"),
        ("seat with a newline", pack({"type": "audio", "seat": "a\nb", "pcm": silence}), "bad_field"),
        ("client id with controls", pack({"type": "start", "client": "car\x00\x07"}), None),
        ("first frame of a seq pair", pack({"type": "audio", "seat": "fuzz-seq", "seq": 5, "pcm": silence}), None),
        ("duplicate seq", pack({"type": "audio", "seat": "fuzz-seq", "seq": 5, "pcm": silence}), "bad_field"),
        ("ping with a map id", pack({"type": "ping", "id": {"nested": [1, 2, None]}}), None),
    ]
