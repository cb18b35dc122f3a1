"""Features of every clip of the corpus, cached on disk per clip, written as one table.

Per clip, as the server would see it at a pause: the whisper-base transcript (the words), the
TurnSense probability after ``LOOKS_MS`` of silence (the first look at the pause, the second
looks later), the recognizer's own view of the end (``recognizer_view.py``: whisper-base's
probability that the sentence ends after the transcript's last word), and the prosody of the
turn's end. The audio model gets ``CONTEXT_MS`` of silence
before the speech, like the seat's ``turn.context_ms``. Whisper and TurnSense dominate the cost
(about 1 s per clip on one core), so their outputs are cached per clip under its audio's sha1;
the prosody and the text view's log-odds (``turn/text_model.py``, from ``smollm2-turn`` in the
model cache) are computed afresh (milliseconds); the table keeps that score so training and the
report need no text model installed.

    PYTHONPATH=. python -m utils.turns.extract --models <cache>   # writes utils/turns/data/features.json
    PYTHONPATH=. python -m utils.turns.extract --models <cache> --rescore-text   # only text_end, from the table's text
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

from kitt_stt.turn.prosody import prosody
from kitt_stt.turn.text_model import TextModelError, TurnTextModel
from kitt_stt.turnsense.model import MODEL_FILE, TurnSenseModel
from utils.turns.corpus import Clip, build
from utils.turns.recognizer_view import RecognizerView

LOOKS_MS = (100, 300, 600, 1000)
CONTEXT_MS = 500
VERSION = 2  # bump when what is cached per clip changes
TABLE = Path(__file__).resolve().parent / "data" / "features.json"


def _whisper(model_dir: Path, lang: str):
    import sherpa_onnx

    return sherpa_onnx.OfflineRecognizer.from_whisper(
        encoder=str(model_dir / "base-encoder.onnx"), decoder=str(model_dir / "base-decoder.int8.onnx"),
        tokens=str(model_dir / "base-tokens.txt"), language=lang, task="transcribe", tail_paddings=700,
        num_threads=1, provider="cpu", decoding_method="greedy_search")


def with_pause(samples: np.ndarray, pause_ms: int) -> np.ndarray:
    """The audio the seat's ring holds at a look: context before the speech, the speech, the pause."""
    return np.concatenate([np.zeros(CONTEXT_MS * 16, dtype=np.int16), samples,
                           np.zeros(pause_ms * 16, dtype=np.int16)])


def model_outputs(clip: Clip, turnsense: TurnSenseModel, whisper: dict, whisper_dir: Path,
                  view: RecognizerView) -> dict:
    """What the two models say about the clip: the costly part, cached."""
    if clip.lang not in whisper:
        whisper[clip.lang] = _whisper(whisper_dir, clip.lang)
    stream = whisper[clip.lang].create_stream()
    stream.accept_waveform(16000, clip.samples.astype(np.float32) / 32768.0)
    whisper[clip.lang].decode_stream(stream)
    return {
        "text": stream.result.text.strip(),
        "p": {str(look): round(turnsense.predict(with_pause(clip.samples, look)).probability, 6) for look in LOOKS_MS},
        "view": view.score(with_pause(clip.samples, LOOKS_MS[0]), clip.lang).as_dict(),
    }


def _text_end(text_model: TurnTextModel, text: str) -> float | None:
    answer = text_model.end_of_turn(text)
    return None if answer is None else round(answer.log_odds, 4)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", type=Path, required=True,
                        help="model cache with turnsense/, whisper-base/ and smollm2-turn/")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "kitt-stt" / "eot-corpus")
    parser.add_argument("--out", type=Path, default=TABLE)
    parser.add_argument("--rescore-text", action="store_true",
                        help="recompute only text_end from each clip's transcript in --out (no audio, no corpus)")
    args = parser.parse_args()
    try:
        text_model = TurnTextModel(args.models / "smollm2-turn")
    except TextModelError as exc:  # every clip's text_end would be missing and the fit would learn nothing from it
        print(f"extract: {exc}", file=sys.stderr)
        return 2
    if args.rescore_text:
        table = json.loads(args.out.read_text())
        for row in table["clips"]:
            row["text_end"] = _text_end(text_model, row["text"])
        args.out.write_text(json.dumps(table, indent=1, ensure_ascii=False) + "\n")
        print(f"{len(table['clips'])} clips rescored -> {args.out}", file=sys.stderr)
        return 0
    clips, notes = build(args.cache)
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    turnsense = TurnSenseModel(args.models / "turnsense" / MODEL_FILE)
    whisper: dict = {}
    view = RecognizerView(args.models / "whisper-base")
    rows = []
    per_clip = args.cache / "features"
    per_clip.mkdir(parents=True, exist_ok=True)
    for index, clip in enumerate(clips):
        key = hashlib.sha1(clip.samples.tobytes() + f"{clip.lang}:{VERSION}".encode()).hexdigest()
        cached = per_clip / f"{key}.json"
        if cached.is_file():
            features = json.loads(cached.read_text())
        else:
            features = model_outputs(clip, turnsense, whisper, args.models / "whisper-base", view)
            cached.write_text(json.dumps(features))
        features["prosody"] = [round(value, 6) for value in prosody(with_pause(clip.samples, LOOKS_MS[0])).as_list()]
        features["text_end"] = _text_end(text_model, features["text"])
        rows.append({"source": clip.source, "speaker": clip.speaker, "lang": clip.lang, "name": clip.name,
                     "complete": clip.complete, "cut": clip.cut, "synthetic": clip.synthetic,
                     "speech_ms": round(len(clip.samples) / 16.0), **features})
        print(f"\r  {index + 1}/{len(clips)} clips", end="", file=sys.stderr, flush=True)
    print(file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"looks_ms": list(LOOKS_MS), "notes": notes, "clips": rows}, indent=1,
                                   ensure_ascii=False) + "\n")
    print(f"{len(rows)} clips -> {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
