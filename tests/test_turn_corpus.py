"""The labelled set's two kinds of cut (utils/turns/corpus.py, align.py): at an inner pause and
mid-sentence at a word boundary found by forced alignment of the known transcript; and the shipped
feature table says which kind each cut clip is."""

from __future__ import annotations

import json

import pytest

from kitt_stt.audio.wavfile import read_wav_16k_mono
from tests.helpers import POCKETSPHINX_WHEEL
from utils.performance.speech import trim_silence
from utils.turns.align import align, word_cut_counts
from utils.turns.corpus import FIXTURES, _with_cuts
from utils.turns.extract import TABLE

NO_WHEEL = not POCKETSPHINX_WHEEL
needs_aligner = pytest.mark.skipif(NO_WHEEL, reason="pocketsphinx 5.0.4 has no wheel for this platform (docs/turns.md)")
GO_FORWARD = FIXTURES / "en_go_forward_ten_meters.wav"


@pytest.mark.parametrize(("words", "kept"), [(1, []), (2, [1]), (3, [1, 2]), (4, [1, 3]), (9, [3, 6]), (24, [8, 16])])
def test_word_cuts_keep_about_a_third_and_two_thirds_never_all_the_words(words: int, kept: list[int]) -> None:
    assert word_cut_counts(words) == kept


@needs_aligner
def test_a_known_sentence_is_cut_mid_sentence_after_its_aligned_words() -> None:
    samples = trim_silence(read_wav_16k_mono(GO_FORWARD))
    words = align(samples, "go forward ten meters")
    assert [w.text for w in words] == ["go", "forward", "ten", "meters"]
    ends = [w.end_sample for w in words]
    assert ends == sorted(ends) and ends[0] > 0 and ends[-1] <= samples.shape[0] + 160
    clips = _with_cuts("goforward", "goforward", "en", GO_FORWARD.name, samples, 2, "go forward ten meters")
    assert [c.cut for c in clips if c.complete] == [""]
    word_cuts = [c for c in clips if c.cut == "word"]
    assert [c.name for c in word_cuts] == [f"{GO_FORWARD.name}[word{i}: {kept}]" for i, kept in
                                           enumerate(["go", "go forward ten"])]
    assert all(not c.complete and c.samples.shape[0] <= ends[2] for c in word_cuts)
    assert {c.cut for c in clips if not c.complete} == {"pause", "word"}


@needs_aligner
def test_a_transcript_that_does_not_fit_gives_no_word_cuts_and_says_why() -> None:
    samples = trim_silence(read_wav_16k_mono(GO_FORWARD))
    notes: list[str] = []
    clips = _with_cuts("goforward", "goforward", "en", GO_FORWARD.name, samples, 2, "go forward xqzvwk meters", notes)
    assert not any(c.cut == "word" for c in clips) and len(notes) == 1 and "no word cuts" in notes[0]


def test_the_shipped_table_labels_every_cut_and_has_both_kinds_in_human_english() -> None:
    clips = json.loads(TABLE.read_text())["clips"]
    assert all((c["cut"] == "") == c["complete"] for c in clips)
    human_en = [c for c in clips if c["lang"] == "en" and not c["synthetic"]]
    kinds = {kind: sum(c["cut"] == kind for c in human_en) for kind in ("pause", "word")}
    assert kinds["pause"] >= 20 and kinds["word"] >= 20
