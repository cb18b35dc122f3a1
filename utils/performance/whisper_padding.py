"""What fills Whisper's frames after the audio, judged by the words (docs/models.md, "Whisper's padding").

    PYTHONPATH=. python utils/performance/whisper_padding.py [--model whisper-base] [--outside]

The server decodes a segment's pieces, each closed by a pause, so whisper-base often reads half a
second of speech followed by ``asr.whisper.tail_paddings`` (700) frames of padding. sherpa-onnx
fills them with 0, a level louder than silence; Whisper was trained on audio padded with digital
silence, whose log-mel is the window's floor. This cuts each English recording with a reference
into speech segments as the upload path does (``cut_segments``, with the schema's VAD settings:
webrtc, 200 ms of silence ends a segment, 300 ms of pre-roll), decodes every piece in English with
sherpa-onnx and with our engine under both fills, joins the pieces and counts word errors against the reference
(case, punctuation and the digits the references spell out ignored), plus the decode time.

Recordings: the project's English fixtures, alsa-utils' channel voices (the file name is the
reference) and pocketsphinx-testdata (its transcriptions). ``--outside`` adds one speaker's read
telephone prompts (asterisk-core-sounds-en-wav, the end-of-turn outside check's recordings), which
nothing was chosen on: reported in rows of their own, never used to choose.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.asr.engine import AsrRequest, DecodeOptions  # noqa: E402
from kitt_stt.config.schema import VadConfig  # noqa: E402
from kitt_stt.server.file_transcription import cut_segments  # noqa: E402
from utils.performance.eot_eval import ASTERISK_DIR, asterisk_prompts, asterisk_texts  # noqa: E402
from utils.performance.speech import to_16k  # noqa: E402
from utils.performance.text_distance import edit_distance  # noqa: E402
from utils.performance.whisper_engines import engine  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "speech"
ALSA = Path("/usr/share/sounds/alsa")
SPHINX = Path("/usr/share/pocketsphinx/test/data")
ARMS = {"sherpa-onnx (zeros)": ("sherpa", "zeros"), "ours, zeros": ("ort", "zeros"),
        "ours, Whisper's silence (default)": ("ort", "whisper")}
SPELLED = {"10": "ten", "4": "four", "5": "five", "7": "seven", "8": "eight", "mr": "mister"}


def recordings(work: Path, outside: bool) -> Iterator[tuple[str, str, np.ndarray, str]]:
    """(set, name, 16 kHz int16 samples, reference)."""
    for path in sorted(FIXTURES.glob("en_*.wav")):
        yield "project", path.name, to_16k(path, work / "clip.wav"), path.stem[3:].replace("_", " ")
    for path in sorted(ALSA.glob("*_*.wav")):
        yield "project", path.name, to_16k(path, work / "clip.wav"), path.stem.replace("_", " ")
    for folder, listing in (("librivox", "transcription"), ("cards", "cards.transcription")):
        if not (SPHINX / folder / listing).is_file():
            continue
        references = dict((name, text) for text, name in re.findall(
            r"<s>(.*?)</s>\s*\((.*?)\)", (SPHINX / folder / listing).read_text()))
        for path in sorted((SPHINX / folder).glob("*.wav")):
            if path.stem in references:
                yield "project", path.name, to_16k(path, work / "clip.wav"), references[path.stem].strip()
    texts = asterisk_texts() if outside else {}
    for name in asterisk_prompts() if texts else []:
        yield "outside", name, to_16k(ASTERISK_DIR / f"{name}.wav", work / "clip.wav"), texts[name]


def pieces(samples: np.ndarray) -> list[np.ndarray]:
    """The recording's speech segments as an upload's are cut (``cut_segments``, the schema's VAD)."""
    return [piece.samples for piece in cut_segments(samples, VadConfig())]


def words(text: str) -> list[str]:
    bare = re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("-", " "))
    return [SPELLED.get(word, word) for word in bare.split()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="whisper-base")
    parser.add_argument("--outside", action="store_true", help="add the outside check's recordings, in their own rows")
    parser.add_argument("--show", action="store_true", help="print every text with errors")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="whisper-padding-") as tmp:
        data = list(recordings(Path(tmp), args.outside))
    print(f"{len(data)} recordings, {sum(len(pieces(x)) for _, _, x, _ in data)} pieces")
    print("| recordings | arm | word errors | WER | decode time |")
    print("|---|---|---|---|---|")
    for label, (name, padding) in ARMS.items():
        asr = engine(args.model, name, padding)
        asr.decode_batch([AsrRequest(np.zeros(16000, np.int16), DecodeOptions(language="en"))])  # warm
        for group in ("project", "outside"):
            errors = total = 0
            seconds = 0.0
            for set_name, clip, samples, reference in data:
                if set_name != group:
                    continue
                texts = []
                for piece in pieces(samples):
                    started = time.perf_counter()
                    [result] = asr.decode_batch([AsrRequest(piece, DecodeOptions(language="en"))])
                    seconds += time.perf_counter() - started
                    texts.append(result.text.strip())
                error = edit_distance(words(reference), words(" ".join(texts)))
                errors, total = errors + error, total + len(words(reference))
                if error and args.show:
                    print(f"  {label}: {clip}: {' | '.join(texts)!r}")
            if total:
                print(f"| {group} | {label} | {errors}/{total} | {100 * errors / total:.1f} % | {seconds:.1f} s |")


if __name__ == "__main__":
    main()
