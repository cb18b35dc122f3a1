"""Whisper's vocabulary as sherpa-onnx wants it, derived from CTranslate2's ``vocabulary.txt``.

``vocabulary.txt`` lists one token per line in GPT-2's byte-level spelling (each byte shown as a
printable character, e.g. ``Ġ`` for a space), specials such as ``<|en|>`` after the text tokens.
sherpa-onnx reads ``tokens.txt`` lines ``<base64 of the token's bytes> <id>`` for text tokens only
(ids it does not know, the specials, are dropped from the transcript), and the special ids and
language codes from the encoder's metadata. Both are derived here from the file itself rather than
hard-coded, so a different Whisper size or a vocabulary with other ids converts correctly.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from functools import cache
from pathlib import Path


class VocabularyError(Exception):
    pass


@cache
def _unicode_to_byte() -> dict[str, int]:
    """Invert GPT-2's byte-to-printable-character table (printable Latin-1 bytes map to themselves)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(byte): byte for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in printable:
            table[chr(256 + shifted)] = byte
            shifted += 1
    return table


def token_bytes(token: str) -> bytes:
    table = _unicode_to_byte()
    try:
        return bytes(table[char] for char in token)
    except KeyError as exc:
        raise VocabularyError(f"token {token!r} is not in GPT-2's byte-level spelling ({exc})") from None


@dataclass(frozen=True)
class WhisperVocabulary:
    tokens: list[str]
    special: dict[str, int]
    language_codes: list[str]
    language_ids: list[int]

    @property
    def text_token_count(self) -> int:
        """Text tokens come first; the first special (``<|endoftext|>``) ends them."""
        return self.special["endoftext"]

    def tokens_file(self) -> str:
        """``tokens.txt`` for sherpa-onnx; the empty token (multilingual id 50256) has no bytes to list."""
        lines = []
        for index in range(self.text_token_count):
            raw = token_bytes(self.tokens[index])
            if raw:
                lines.append(f"{base64.b64encode(raw).decode('ascii')} {index}\n")
        return "".join(lines)


_REQUIRED = ("endoftext", "startoftranscript", "translate", "transcribe", "startoflm", "startofprev",
             "nocaptions", "notimestamps")


def read_vocabulary(path: Path) -> WhisperVocabulary:
    text = path.read_text(encoding="utf-8")
    tokens = text.removesuffix("\n").split("\n")  # not splitlines(): tokens may hold other line breaks
    special: dict[str, int] = {}
    codes: list[str] = []
    ids: list[int] = []
    for index, token in enumerate(tokens):
        if token.startswith("<|") and token.endswith("|>"):
            name = token[2:-2]
            special.setdefault(name, index)
            if name.isalpha() and name.islower() and len(name) <= 3:  # language tags: en, zh, haw, ...
                codes.append(name)
                ids.append(index)
    missing = [name for name in _REQUIRED if name not in special]
    if missing:
        raise VocabularyError(f"{path}: not a Whisper vocabulary, special tokens missing: {missing}")
    if not codes:
        raise VocabularyError(f"{path}: no language tokens; only multilingual Whisper models are supported")
    return WhisperVocabulary(tokens=tokens, special=special, language_codes=codes, language_ids=ids)
