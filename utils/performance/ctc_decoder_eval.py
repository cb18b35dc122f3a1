"""pyctcdecode vs our CTC beam search: correctness on the tone model and speed, side by side.

Why this exists: pyctcdecode is the usual off-the-shelf CTC beam search with hotwords; we
evaluated it before keeping our own (decision and numbers in docs/models.md).  pyctcdecode
0.5.0 declares ``numpy<2`` (our stack is on numpy 2), so it is not a dependency: install it
beside the project for this tool only with ``pip install --no-deps pyctcdecode==0.5.0 pygtrie``.

    python utils/performance/ctc_decoder_eval.py
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from kitt_stt.asr.ctc import HotwordTrie, beam_search, greedy, tokenize_hotword  # noqa: E402
from kitt_stt.asr.engine import AsrRequest  # noqa: E402
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine  # noqa: E402
from kitt_stt.asr.sense_voice_model import load_sense_voice_model  # noqa: E402
from kitt_stt.config.schema import AsrConfig  # noqa: E402
from kitt_stt.hotwords import Hotword  # noqa: E402
from kitt_stt.models.tone_model import TOKENS, build_tone_model  # noqa: E402
from tests.test_ort_engine import ambiguous_utterance  # noqa: E402
from tests.test_tone_model import random_utterance  # noqa: E402


def log_softmax(logits: np.ndarray) -> np.ndarray:
    return logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)


def main() -> int:
    try:
        from pyctcdecode import build_ctcdecoder
    except ImportError:
        print("pyctcdecode is not installed: pip install --no-deps pyctcdecode==0.5.0 pygtrie", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        build_tone_model(Path(tmp))
        engine = OrtSenseVoiceEngine(load_sense_voice_model(Path(tmp)), "tone", AsrConfig())

        def logits_of(samples: np.ndarray) -> np.ndarray:
            logits, lengths = engine._run([engine._prepare(AsrRequest(samples))])
            return logits[0][4 : lengths[0]]  # the text frames only

        labels = ["", *[token if not token.startswith("<") else f"§{index}" for index, token in
                        enumerate(TOKENS)][1:]]
        pyctc = build_ctcdecoder(labels)
        rng = np.random.default_rng(7)
        agree = {"ours": 0, "pyctcdecode": 0}
        total = 60
        for _ in range(total):
            text, audio = random_utterance(rng, hardest=False)
            frames = logits_of((np.clip(audio, -1, 1) * 32767).astype(np.int16))
            ours = "".join(TOKENS[t] for t in beam_search(frames, len(frames), 4).token_ids)
            theirs = pyctc.decode(log_softmax(frames), beam_width=4).replace(" ", "")
            agree["ours"] += ours == text
            agree["pyctcdecode"] += theirs == text
        print(f"tone model, {total} clean utterances, beam 4, no hotwords: exact text "
              f"ours {agree['ours']}/{total}, pyctcdecode {agree['pyctcdecode']}/{total}")

        ambiguous = logits_of(ambiguous_utterance())
        vocabulary = {token: index for index, token in enumerate(TOKENS)}
        trie = HotwordTrie([(tokenize_hotword(Hotword("A门B", 3.0), vocabulary), 3.0)])
        ours_plain = "".join(TOKENS[t] for t in greedy(ambiguous, len(ambiguous)).token_ids)
        ours_hot = "".join(TOKENS[t] for t in beam_search(ambiguous, len(ambiguous), 4, trie).token_ids)
        theirs_hot = {weight: pyctc.decode(log_softmax(ambiguous), beam_width=4, hotwords=["A门B"],
                                           hotword_weight=weight).replace(" ", "")
                      for weight in (3.0, 10.0, 30.0)}
        print(f"ambiguous burst: plain {ours_plain!r}; hotword 'A门B' ours {ours_hot!r}; pyctcdecode "
              + ", ".join(f"weight {w:g} {t!r}" for w, t in theirs_hot.items()))

    rng = np.random.default_rng(0)
    print("| vocab | frames | beam | hotwords | ours (ms) | pyctcdecode (ms) |")
    print("|---|---|---|---|---|---|")
    for vocab, frames in ((25055, 100), (25055, 500)):
        logits = rng.normal(0, 3, (frames, vocab)).astype(np.float32)
        logits[:, 0] += 4  # mostly blank, like real CTC output
        labels = [""] + [f"w{i}" for i in range(1, vocab)]
        pyctc = build_ctcdecoder(labels)
        vocabulary = {label: index for index, label in enumerate(labels)}
        for hotword_count in (0, 10, 100):
            words = [f"w{i} w{i + 1}" for i in range(1, 2 * hotword_count, 2)]
            trie = HotwordTrie([(tokenize_hotword(Hotword(w, 2.0), vocabulary), 2.0) for w in words]) if words else None
            started = time.perf_counter()
            beam_search(logits, frames, 4, trie)
            ours_ms = (time.perf_counter() - started) * 1000
            started = time.perf_counter()
            pyctc.decode(log_softmax(logits), beam_width=4, hotwords=words or None)
            theirs_ms = (time.perf_counter() - started) * 1000
            print(f"| {vocab} | {frames} | 4 | {hotword_count} | {ours_ms:.0f} | {theirs_ms:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
