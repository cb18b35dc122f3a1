"""The fused decision's feature vector: one list of floats, built the same way by the training
script (``utils/turns/train.py``, from cached clips) and by the policy (from the seat's ring).

The model's probability enters as a clipped logit, so the combiner can weigh how sure it is;
``silence_s`` is how long the pause had lasted when the model looked: silence itself is evidence.
Chosen by leave-one-speaker-out AUC on the labelled set (docs/turns.md): the word count is left
out (cut turns are shorter than complete ones by construction, so it learns the corpus, not the
speaker), and so are final punctuation (Whisper punctuates cut phrases too), the pitch slope,
energy decay and final lengthening, which did not help held-out speakers there (the feature
table keeps all four prosody numbers, so a re-fit on other recordings can choose again).
"""

from __future__ import annotations

import math

from kitt_stt.turn.prosody import Prosody
from kitt_stt.turn.words import WordEvidence

FEATURES = ("model_logit", "silence_s", "unfinished", "complete_form", "pitch_final")
# which kind of evidence each feature is, for the decision's metadata ("which evidence decided")
GROUPS = ("model", "silence", "words", "words", "prosody")
_P_FLOOR = 0.004  # the int8 model's outputs lie in 0.0047 .. 0.9909


def model_logit(probability: float | None) -> float:
    """The model's p as a logit; a missing prediction is neutral (0)."""
    if probability is None:
        return 0.0
    p = min(max(probability, _P_FLOOR), 1.0 - _P_FLOOR)
    return math.log(p / (1.0 - p))


def feature_vector(probability: float | None, silence_ms: float, words: WordEvidence, prosody: Prosody) -> list[float]:
    return [model_logit(probability), silence_ms / 1000.0, float(words.unfinished), float(words.complete_form),
            prosody.pitch_final]
