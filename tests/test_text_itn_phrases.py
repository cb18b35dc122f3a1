"""Inverse text normalisation over a table of number phrases (``tests/fixtures/text/itn_phrases.tsv``):
dates, times, money, units, percentages, ordinals and phone numbers in English and Mandarin, written
as an ASR engine writes them, punctuation included (issue 33: "5:30 ." and "1045" for "ten forty five")."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from kitt_stt.text.itn import WetextNormalizer
from kitt_stt.text.language import TextLanguage
from tests.helpers import run_server, tone_pcm, wav_bytes

TABLE = Path(__file__).parent / "fixtures/text/itn_phrases.tsv"
NORMALIZER = WetextNormalizer()
#: a space before a mark that closes a clause or sentence (the fault: "It is 20% .")
SPACED_MARK = re.compile(r"\s[,.!?;:，。！？、；：]")
#: marks no number uses, which must all come through, in order
SENTENCE_MARKS = re.compile(r"""[!?;"()，。！？、；：“”（）]""")


def _table() -> list[tuple[str, str, str, tuple[str, ...], str]]:
    """(lang, kind, spoken, accepted outputs, why it is known wrong or "") per phrase."""
    rows = []
    for line in TABLE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            lang, kind, spoken, accepted, *known = line.split("\t")
            rows.append((lang, kind, spoken, tuple(accepted.split("|")), known[0] if known else ""))
    return rows


TABLE_ROWS = _table()
ROWS = [pytest.param(lang, spoken, accepted, id=f"{lang}-{kind}-{spoken}",
                     marks=[pytest.mark.xfail(strict=True, reason=known)] if known else [])
        for lang, kind, spoken, accepted, known in TABLE_ROWS]


def test_the_table_covers_what_the_issue_asks() -> None:
    for lang in ("en", "zh"):
        kinds = {kind for language, kind, *_ in TABLE_ROWS if language == lang}
        assert kinds >= {"date", "time", "money", "unit", "percent", "ordinal", "phone", "keep"}
    assert len(TABLE_ROWS) >= 250


@pytest.mark.parametrize(("lang", "spoken", "accepted"), ROWS)
def test_phrase(lang: str, spoken: str, accepted: tuple[str, ...]) -> None:
    assert NORMALIZER.normalize(spoken, TextLanguage(lang)) in accepted


@pytest.mark.parametrize(("lang", "spoken", "accepted"), [pytest.param(*row.values, id=row.id) for row in ROWS])
def test_punctuation_keeps_its_place(lang: str, spoken: str, accepted: tuple[str, ...]) -> None:
    """Known-wrong phrases too: whatever the grammar makes of the numbers, no mark moves."""
    written = NORMALIZER.normalize(spoken, TextLanguage(lang))
    assert len(SPACED_MARK.findall(written)) <= len(SPACED_MARK.findall(spoken)), written
    assert SENTENCE_MARKS.findall(written) == SENTENCE_MARKS.findall(spoken), written


def test_a_real_server_writes_the_issue_examples_without_stray_spaces(tmp_path: Path, model_cache: Path) -> None:
    """Through the server's text stage (ITN in its worker process) on an upload: the engine writes
    "Leave at ten forty five!" and "It is twenty percent." (it was "Leave at 1045 !", "It is 20% .")."""
    pcm = tone_pcm("打开车门", tail_ms=1000) + tone_pcm("关车窗", tail_ms=600)
    with run_server(tmp_path, model_cache, module="tests.english_numbers_server") as server:
        response = httpx.post(f"{server.http}/v1/audio/transcriptions", timeout=60,
                              files={"file": ("turns.wav", wav_bytes(pcm))},
                              data={"model": "whisper-1", "response_format": "verbose_json", "language": "en"})
    assert response.status_code == 200, response.text
    assert [segment["text"] for segment in response.json()["segments"]] == ["Leave at 10:45!", "It is 20%."]
