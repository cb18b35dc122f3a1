"""Every human and synthetic zh/en recording the project can use for language identification.

Sources (Debian packages, installed with apt; a missing one is reported and skipped):

- ``tests/fixtures/speech``: the project's five human recordings (3 en, 2 zh);
- ``pocketsphinx-testdata``: US English speech (cards, LibriVox, digits);
- ``alsa-utils``: the speaker-test voice ("Front Left", ...), English;
- ``gcin-voice``: Mandarin syllables read one by one by two speakers (``3.ogg``, ``5.ogg``),
  joined here into car-command phrases (bopomofo + tone digit; a missing tone falls back to
  another tone of the syllable);
- ``espeak-ng``: synthetic English and Mandarin commands.

Each recording has a split, ``tune`` or ``held_out``, so a setting chosen on one is reported on
the other: every other recording of each source is held out (gcin-voice: every other phrase,
both speakers), and the five fixtures are always held out.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from kitt_stt.audio.wavfile import read_wav_16k_mono
from utils.performance.speech import espeak, to_16k, trim_silence

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "speech"
POCKETSPHINX = Path("/usr/share/pocketsphinx/test/data")
ALSA = Path("/usr/share/sounds/alsa")
GCIN = Path("/usr/share/gcin-voice/ogg")
SYLLABLE_GAP = 0.04  # seconds of silence between joined syllables

ESPEAK_EN = ["turn on the air conditioning", "open the window", "navigate home", "play some music",
             "call my mother", "what is the weather like today", "close the sunroof",
             "set the temperature to twenty two", "find the nearest gas station", "turn up the volume",
             "next song please", "how far is the airport"]
# espeak-ng 1.51's "cmn" voice reads Chinese characters as pinyin spelled in English ("da three
# kai one"); its "cmn-latn-pinyin" voice speaks pinyin with tone digits as Mandarin.
ESPEAK_ZH = ["da3 kai1 kong1 tiao2", "da3 kai1 che1 chuang1", "dao3 hang2 hui2 jia1", "bo1 fang4 yin1 yue4",
             "gei3 ma1 ma5 da3 dian4 hua4", "jin1 tian1 tian1 qi4 zen3 me5 yang4", "guan1 bi4 tian1 chuang1",
             "ba3 wen1 du4 tiao2 dao4 er4 shi2 er4 du4", "fu4 jin4 de5 jia1 you2 zhan4", "ba3 yin1 liang4 tiao2 da4",
             "xia4 yi4 shou3 ge1", "ji1 chang3 hai2 you3 duo1 yuan3"]
GCIN_PHRASES = {  # pinyin: bopomofo syllables (tone digit; none = first tone)
    "da kai che men": "ㄉㄚ3 ㄎㄞ ㄔㄜ ㄇㄣ2",
    "guan bi kong tiao": "ㄍㄨㄢ ㄅㄧ4 ㄎㄨㄥ ㄊㄧㄠ2",
    "jin tian tian qi zen me yang": "ㄐㄧㄣ ㄊㄧㄢ ㄊㄧㄢ ㄑㄧ4 ㄗㄣ3 ㄇㄜ ㄧㄤ4",
    "dao hang hui jia": "ㄉㄠ3 ㄏㄤ2 ㄏㄨㄟ2 ㄐㄧㄚ",
    "bo fang yin yue": "ㄅㄛ ㄈㄤ4 ㄧㄣ ㄩㄝ4",
    "da kai che chuang": "ㄉㄚ3 ㄎㄞ ㄔㄜ ㄔㄨㄤ",
    "tiao gao wen du": "ㄊㄧㄠ2 ㄍㄠ ㄨㄣ ㄉㄨ4",
    "wo xiang ting xin wen": "ㄨㄛ3 ㄒㄧㄤ3 ㄊㄧㄥ ㄒㄧㄣ ㄨㄣ2",
    "fu jin de jia you zhan": "ㄈㄨ4 ㄐㄧㄣ4 ㄉㄜ ㄐㄧㄚ ㄧㄡ2 ㄓㄢ4",
    "gei ma ma da dian hua": "ㄍㄟ3 ㄇㄚ ㄇㄚ ㄉㄚ3 ㄉㄧㄢ4 ㄏㄨㄚ4",
    "xian zai ji dian le": "ㄒㄧㄢ4 ㄗㄞ4 ㄐㄧ3 ㄉㄧㄢ3 ㄌㄜ",
    "ba yin liang tiao xiao yi dian": "ㄅㄚ3 ㄧㄣ ㄌㄧㄤ4 ㄊㄧㄠ2 ㄒㄧㄠ3 ㄧ4 ㄉㄧㄢ3",
    "guan diao shou yin ji": "ㄍㄨㄢ ㄉㄧㄠ4 ㄕㄡ ㄧㄣ ㄐㄧ",
    "qian mian lu kou zuo zhuan": "ㄑㄧㄢ2 ㄇㄧㄢ4 ㄌㄨ4 ㄎㄡ3 ㄗㄨㄛ3 ㄓㄨㄢ3",
}


@dataclass(frozen=True)
class Recording:
    name: str
    source: str
    lang: str
    split: str  # "tune" or "held_out" (set by load_corpus)
    samples: np.ndarray  # int16, 16 kHz


def load_corpus(missing: list[str]) -> list[Recording]:
    """All recordings found; the names of sources that are not installed go to ``missing``."""
    recordings: list[Recording] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        recordings += _fixtures()
        recordings += _alternate(_pocketsphinx(work, missing))
        recordings += _alternate(_alsa(work, missing))
        recordings += _gcin(work, missing)
        recordings += _alternate(_espeak(work, missing))
    return recordings


def _alternate(recordings: list[Recording]) -> list[Recording]:
    """Every other recording (by language) for tuning, the rest held out."""
    counts: dict[str, int] = {}
    split = []
    for rec in recordings:
        index = counts[rec.lang] = counts.get(rec.lang, -1) + 1
        split.append(replace(rec, split="tune" if index % 2 else "held_out"))
    return split


def _fixtures() -> list[Recording]:
    return [Recording(clip.stem, "fixtures", clip.name[:2], "held_out", read_wav_16k_mono(clip))
            for clip in sorted(FIXTURES.glob("*.wav"))]


def _pocketsphinx(work: Path, missing: list[str]) -> list[Recording]:
    if not POCKETSPHINX.is_dir():
        missing.append("pocketsphinx-testdata (apt-get install pocketsphinx-testdata)")
        return []
    found = []
    for path in sorted([*POCKETSPHINX.rglob("*.wav"), *POCKETSPHINX.rglob("*.raw")]):
        # .raw: headerless 16 kHz int16 mono
        samples = np.fromfile(path, dtype="<i2") if path.suffix == ".raw" else to_16k(path, work / "ps.wav")
        found.append(Recording(f"{path.parent.name}/{path.stem}", "pocketsphinx", "en", "",
                               trim_silence(samples)))
    return found


def _alsa(work: Path, missing: list[str]) -> list[Recording]:
    clips = sorted(path for path in ALSA.glob("*.wav") if path.stem != "Noise") if ALSA.is_dir() else []
    if not clips:
        missing.append("alsa-utils (apt-get install alsa-utils)")
    return [Recording(clip.stem, "alsa-utils", "en", "", trim_silence(to_16k(clip, work / "alsa.wav")))
            for clip in clips]


def _syllable(work: Path, syllable: str, speaker: str) -> np.ndarray:
    base = syllable.rstrip("12345")
    for name in (syllable, base, *(f"{base}{tone}" for tone in "12345")):
        path = GCIN / name / f"{speaker}.ogg"
        if path.is_file():
            return trim_silence(to_16k(path, work / "syllable.wav"))
    raise FileNotFoundError(f"gcin-voice has no {syllable} by speaker {speaker}")


def _gcin(work: Path, missing: list[str]) -> list[Recording]:
    if not GCIN.is_dir():
        missing.append("gcin-voice (apt-get install gcin-voice)")
        return []
    gap = np.zeros(int(SYLLABLE_GAP * 16000), dtype=np.int16)
    found = []
    for index, (pinyin, bopomofo) in enumerate(GCIN_PHRASES.items()):
        for speaker in ("3", "5"):
            parts: list[np.ndarray] = []
            for syllable in bopomofo.split():
                parts += [_syllable(work, syllable, speaker), gap]
            found.append(Recording(f"{pinyin.replace(' ', '_')}#{speaker}", "gcin-voice", "zh",
                                   "tune" if index % 2 else "held_out", np.concatenate(parts[:-1])))
    return found


def _espeak(work: Path, missing: list[str]) -> list[Recording]:
    try:
        english = [Recording(text.replace(" ", "_"), "espeak-ng", "en", "", espeak(text, "en-us", work))
                   for text in ESPEAK_EN]
        mandarin = [Recording(text.replace(" ", "_"), "espeak-ng", "zh", "", espeak(text, "cmn-latn-pinyin", work))
                    for text in ESPEAK_ZH]
    except FileNotFoundError:
        missing.append("espeak-ng and sox (apt-get install espeak-ng sox)")
        return []
    return english + mandarin
