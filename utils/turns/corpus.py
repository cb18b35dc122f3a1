"""A labelled set of turns, complete and cut at word boundaries, from what registries give.

Every source is fetched or read at build time; no third-party audio is committed. Each clip has
a speaker id, for leave-one-speaker-out cross-validation:

* human English, Debian: alsa-utils' channel voices, pocketsphinx-testdata's LibriVox sentences,
  "cards" clips and "go forward ten meters", each cut two ways, told apart by ``Clip.cut``: at
  its longest inner pauses (``pause``: phrase boundaries, often a whole phrase) and, their
  transcripts being known, mid-sentence after about 1/3 and 2/3 of the words (``word``: forced
  alignment, ``align.py``);
* human conversation, PyPI: pyannote-audio 3.3.2's 30 s sample with its speaker turns (RTTM):
  each turn is complete at its end and cut at its inner pauses;
* human Mandarin, Debian ``gcin-voice``: two speakers' recorded syllables joined into car
  commands, complete and cut at a word boundary (joined syllables: citation tones, marked);
* synthetic, marked: espeak-ng English and Mandarin (``cmn-latn-pinyin``) pairs of
  ``utils/performance/eot_eval.py``.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kitt_stt.models.pypi import pip_download
from utils.performance.eot_eval import ENGLISH, MANDARIN
from utils.performance.speech import espeak, to_16k, trim_silence
from utils.turns.align import AlignError, word_cuts

ALSA_DIR = Path("/usr/share/sounds/alsa")
SPHINX_DIR = Path("/usr/share/pocketsphinx/test/data")
GCIN_DIR = Path("/usr/share/gcin-voice/ogg")
FIXTURES = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "speech"
PYANNOTE = "pyannote-audio==3.3.2"  # pip_download names the wheel pyannote_audio-*
PYANNOTE_WAV = "pyannote/audio/sample/sample.wav"
PYANNOTE_RTTM = "pyannote/audio/sample/sample.rttm"

# Mandarin car commands in zhuyin (gcin-voice's file names: no digit = first tone, 1 = neutral),
# with the word boundary where the cut variant stops.
GCIN_COMMANDS: list[tuple[str, list[str], int]] = [
    ("打开车门", ["ㄉㄚ3", "ㄎㄞ", "ㄔㄜ", "ㄇㄣ2"], 2),
    ("关闭车窗", ["ㄍㄨㄢ", "ㄅㄧ4", "ㄔㄜ", "ㄔㄨㄤ"], 2),
    ("播放音乐", ["ㄅㄛ", "ㄈㄤ4", "ㄧㄣ", "ㄩㄝ4"], 2),
    ("把空调打开", ["ㄅㄚ3", "ㄎㄨㄥ", "ㄊㄧㄠ2", "ㄉㄚ3", "ㄎㄞ"], 3),
    ("导航到加油站", ["ㄉㄠ3", "ㄏㄤ2", "ㄉㄠ4", "ㄐㄧㄚ", "ㄧㄡ2", "ㄓㄢ4"], 3),
    ("打电话给妈妈", ["ㄉㄚ3", "ㄉㄧㄢ4", "ㄏㄨㄚ4", "ㄍㄟ3", "ㄇㄚ", "ㄇㄚ1"], 4),
    ("今天天气怎么样", ["ㄐㄧㄣ", "ㄊㄧㄢ", "ㄊㄧㄢ", "ㄑㄧ4", "ㄗㄣ3", "ㄇㄜ1", "ㄧㄤ4"], 4),
    ("我想听新闻", ["ㄨㄛ3", "ㄒㄧㄤ3", "ㄊㄧㄥ", "ㄒㄧㄣ", "ㄨㄣ2"], 2),
    ("温度调到二十度", ["ㄨㄣ", "ㄉㄨ4", "ㄊㄧㄠ2", "ㄉㄠ4", "ㄦ4", "ㄕ2", "ㄉㄨ4"], 4),
    ("打开天窗", ["ㄉㄚ3", "ㄎㄞ", "ㄊㄧㄢ", "ㄔㄨㄤ"], 2),
    ("声音大一点", ["ㄕㄥ", "ㄧㄣ", "ㄉㄚ4", "ㄧ4", "ㄉㄧㄢ3"], 2),
    ("去最近的停车场", ["ㄑㄩ4", "ㄗㄨㄟ4", "ㄐㄧㄣ4", "ㄉㄜ1", "ㄊㄧㄥ2", "ㄔㄜ", "ㄔㄤ3"], 4),
]
GCIN_VOICES = ("3", "5")
SYLLABLE_GAP_MS, WORD_GAP_MS = 30, 90  # joined syllables: a little air inside a word, more between
MIN_PART_SAMPLES = 6400  # a cut keeps at least 0.4 s of speech


@dataclass
class Clip:
    source: str
    speaker: str
    lang: str  # "en" or "zh"
    name: str
    complete: bool
    samples: np.ndarray  # int16, 16 kHz, trimmed to the speech
    synthetic: bool = False
    cut: str = ""  # how a cut clip was cut: "pause" (at an inner pause) or "word" (mid-sentence); "" if complete


def pause_cuts(samples: np.ndarray, max_cuts: int, lo: float = 0.25, hi: float = 0.85) -> list[int]:
    """Sample positions of the longest pauses (runs of 10 ms frames 25 dB under the clip's
    loudest, at least 60 ms) between ``lo`` and ``hi`` of the clip: its inner word boundaries."""
    hop = 160
    frames = samples[: samples.shape[0] // hop * hop].astype(np.float64).reshape(-1, hop)
    db = 10.0 * np.log10(np.mean(frames ** 2, axis=1) + 1.0)
    quiet = np.concatenate([[0], (db < db.max() - 25.0).astype(np.int8), [0]])
    starts, ends = np.flatnonzero(np.diff(quiet) == 1), np.flatnonzero(np.diff(quiet) == -1)
    count = db.shape[0]
    runs = [(end - start, (start + end) // 2) for start, end in zip(starts, ends, strict=True)
            if end - start >= 6 and lo * count <= (start + end) / 2 <= hi * count]
    chosen = sorted(middle for _, middle in sorted(runs, reverse=True)[:max_cuts])
    return [middle * hop for middle in chosen]


def _with_cuts(source: str, speaker: str, lang: str, name: str, samples: np.ndarray, max_cuts: int,
               transcript: str | None = None, notes: list[str] | None = None) -> list[Clip]:
    """The complete clip, its pause cuts and, with a transcript, its mid-sentence word cuts."""
    clips = [Clip(source, speaker, lang, name, True, samples)]
    for index, cut in enumerate(pause_cuts(samples, max_cuts)):
        part = trim_silence(samples[:cut])
        if part.shape[0] >= MIN_PART_SAMPLES:
            clips.append(Clip(source, speaker, lang, f"{name}[cut{index}]", False, part, cut="pause"))
    if transcript is None:
        return clips
    try:
        cuts = word_cuts(samples, transcript)
    except AlignError as exc:
        if notes is not None:
            notes.append(f"{name}: no word cuts: {exc}")
        return clips
    for index, (cut, kept) in enumerate(cuts):
        part = trim_silence(samples[:cut])
        if part.shape[0] >= MIN_PART_SAMPLES:
            clips.append(Clip(source, speaker, lang, f"{name}[word{index}: {kept}]", False, part, cut="word"))
    return clips


def _transcripts(path: Path) -> dict[str, str]:
    """A Sphinx transcription file (``<s> words </s> (id)`` per line) as id -> words."""
    out: dict[str, str] = {}
    for line in path.read_text().splitlines():
        if "(" in line:
            words, _, key = line.rpartition("(")
            out[key.rstrip(") ")] = " ".join(w for w in words.split() if w not in ("<s>", "</s>"))
    return out


def debian_english(work: Path, notes: list[str]) -> list[Clip]:
    """The human English clips; their transcripts are the file names and the Sphinx transcriptions."""
    clips: list[Clip] = []
    for path in sorted(ALSA_DIR.glob("*_*.wav")):
        clips += _with_cuts("alsa", "alsa", "en", path.name, trim_silence(to_16k(path, work / "a.wav")), 1,
                            path.stem.replace("_", " ").lower(), notes)
    for source, max_cuts in (("librivox", 3), ("cards", 2)):
        folder = SPHINX_DIR / source
        texts = _transcripts(folder / ("transcription" if source == "librivox" else "cards.transcription"))
        for path in sorted(folder.glob("*.wav")):
            clips += _with_cuts(source, source, "en", path.name, trim_silence(to_16k(path, work / "a.wav")),
                                max_cuts, texts.get(path.stem), notes)
    fixture = FIXTURES / "en_go_forward_ten_meters.wav"
    if fixture.is_file():
        samples = trim_silence(to_16k(fixture, work / "a.wav"))
        clips += _with_cuts("goforward", "goforward", "en", fixture.name, samples, 2, "go forward ten meters", notes)
    return clips


def pyannote_conversation(cache: Path, work: Path) -> list[Clip]:
    """The conversation's speaker turns that no other speaker overlaps by more than 0.25 s."""
    wav, rttm = cache / "pyannote-sample.wav", cache / "pyannote-sample.rttm"
    if not wav.is_file():
        with tempfile.TemporaryDirectory(prefix="kitt-eot-wheel-") as tmp, \
                zipfile.ZipFile(pip_download(PYANNOTE, Path(tmp))) as wheel:
            cache.mkdir(parents=True, exist_ok=True)
            rttm.write_bytes(wheel.read(PYANNOTE_RTTM))
            wav.write_bytes(wheel.read(PYANNOTE_WAV))
    audio = to_16k(wav, work / "p.wav")
    turns = [(float(f[3]), float(f[3]) + float(f[4]), f[7]) for f in
             (line.split() for line in rttm.read_text().splitlines()) if f and f[0] == "SPEAKER"]
    clips: list[Clip] = []
    for index, (start, end, speaker) in enumerate(turns):
        overlap = max((min(end, e) - max(start, s) for s, e, other in turns if other != speaker), default=0.0)
        if end - start < 1.0 or overlap > 0.25 or end > 29.9:
            continue
        samples = trim_silence(audio[int(start * 16000):int(end * 16000)])
        clips += _with_cuts("pyannote", f"pyannote-{speaker}", "en", f"turn{index}", samples, 2)
    return clips


def _syllable(path: Path, work: Path) -> np.ndarray:
    return trim_silence(to_16k(path, work / "g.wav"), threshold=500)


def gcin_mandarin(work: Path) -> list[Clip]:
    clips: list[Clip] = []
    for voice in GCIN_VOICES:
        for text, syllables, boundary in GCIN_COMMANDS:
            paths = [GCIN_DIR / syllable / f"{voice}.ogg" for syllable in syllables]
            if not all(path.is_file() for path in paths):
                continue
            parts = [_syllable(path, work) for path in paths]
            gap = [np.zeros(SYLLABLE_GAP_MS * 16, dtype=np.int16), np.zeros(WORD_GAP_MS * 16, dtype=np.int16)]
            joined: list[np.ndarray] = []
            for index, part in enumerate(parts):
                joined += [part, gap[1] if index + 1 == boundary else gap[0]]
            speaker = f"gcin-{voice}"
            clips.append(Clip("gcin", speaker, "zh", text, True, np.concatenate(joined[:-1])))
            cut: list[np.ndarray] = []
            for part in parts[:boundary]:
                cut += [part, gap[0]]
            clips.append(Clip("gcin", speaker, "zh", f"{text}[cut]", False, np.concatenate(cut[:-1]), cut="word"))
    return clips


def espeak_pairs(work: Path) -> list[Clip]:
    clips: list[Clip] = []
    voices = (("espeak-en", "en", "en", ENGLISH), ("espeak-cmn", "cmn-latn-pinyin", "zh", MANDARIN))
    for source, voice, lang, pairs in voices:
        for full, partial in pairs:
            clips.append(Clip(source, source, lang, full, True, espeak(full, voice, work), synthetic=True))
            clips.append(Clip(source, source, lang, partial, False, espeak(partial, voice, work), synthetic=True,
                              cut="word"))
    return clips


def build(cache: Path) -> tuple[list[Clip], list[str]]:
    """Every source that is available here; notes say which were not and why."""
    notes: list[str] = []
    clips: list[Clip] = []
    if shutil.which("sox") is None:
        return [], ["sox missing (apt-get install sox): no corpus"]
    with tempfile.TemporaryDirectory(prefix="kitt-eot-corpus-") as tmp:
        work = Path(tmp)
        clips += debian_english(work, notes)
        try:
            clips += pyannote_conversation(cache, work)
        except (OSError, subprocess.SubprocessError, KeyError, zipfile.BadZipFile, Exception) as exc:
            notes.append(f"pyannote sample skipped: {exc}")
        if GCIN_DIR.is_dir():
            clips += gcin_mandarin(work)
        else:
            notes.append("gcin-voice missing (apt-get install gcin-voice): no human Mandarin")
        if shutil.which("espeak-ng"):
            clips += espeak_pairs(work)
        else:
            notes.append("espeak-ng missing: no synthetic source")
    return clips, notes
