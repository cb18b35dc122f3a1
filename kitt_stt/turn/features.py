"""The fused decision's feature vector: one list of floats, built the same way by the training
script (``utils/turns/train.py``, from cached scores) and by the policy (from the seat's final).

The shipped weights use two features (``FEATURES``): ``text_end``, the text view's log-odds that
the user's message ends after these words (``text_model.py``), and ``han_text``, the offset for
text with Han characters (the view's log-odds run ~10 lower for Chinese); both are NaN, "no
opinion", without words or without the model, and the combiner then leaves them out. They are
fitted on the text view's development set, the project's phrase table complete and cut
(``utils/turns/text_dev.py``), not on the audio clips the report tests on (docs/turns.md).

The other candidates (``KINDS``) stay buildable, because the weights file names its features and a
re-fit on in-car recordings can choose again: the model's p as a clipped logit, ``silence_s`` (how
long the pause had lasted when the model looked), the words by rule (``unfinished``,
``complete_form``) and the prosody of the turn's end. On the project's held-out speakers p and the
silence added nothing to the text view, and 0.5.0's rule and prosody features were weaker than it
(docs/turns.md).
"""

from __future__ import annotations

import math

from kitt_stt.turn.prosody import Prosody
from kitt_stt.turn.words import WordEvidence

# every feature this code can build, with the kind of evidence it is (the decision's metadata says
# which kind decided); FEATURES are those the combiner uses, in its weights' order
KINDS = {"model_logit": "model", "silence_s": "silence", "unfinished": "words", "complete_form": "words",
         "text_end": "words", "han_text": "words", "pitch_final": "prosody", "pitch_slope": "prosody",
         "energy_slope": "prosody", "final_lengthening": "prosody"}
EVIDENCE_KINDS = ("model", "silence", "words", "prosody")
FEATURES = ("text_end", "han_text")
_P_FLOOR = 0.004  # the int8 model's outputs lie in 0.0047 .. 0.9909


def model_logit(probability: float | None) -> float:
    """The model's p as a logit; a missing prediction is neutral (0)."""
    if probability is None:
        return 0.0
    p = min(max(probability, _P_FLOOR), 1.0 - _P_FLOOR)
    return math.log(p / (1.0 - p))


def feature_values(probability: float | None, silence_ms: float, words: WordEvidence,
                   prosody: Prosody) -> dict[str, float]:
    """Every candidate feature by name (``KINDS``): the training script may choose among them."""
    return {"model_logit": model_logit(probability), "silence_s": silence_ms / 1000.0,
            "unfinished": float(words.unfinished), "complete_form": float(words.complete_form),
            **_text_view(words), "pitch_final": prosody.pitch_final,
            "pitch_slope": prosody.pitch_slope, "energy_slope": prosody.energy_slope,
            "final_lengthening": prosody.final_lengthening}


def _text_view(words: WordEvidence) -> dict[str, float]:
    """The text view's log-odds and whether the text is Chinese (its log-odds run ~10 lower there:
    the offset is the text view's, so without the view both are "no opinion")."""
    if words.text_end is None:
        return {"text_end": math.nan, "han_text": math.nan}
    return {"text_end": words.text_end, "han_text": float(words.han)}


def feature_vector(probability: float | None, silence_ms: float, words: WordEvidence, prosody: Prosody,
                   features: tuple[str, ...]) -> list[float]:
    """The named features in ``features`` order: the weights file's, so a re-fit may choose others."""
    values = feature_values(probability, silence_ms, words, prosody)
    return [values[name] for name in features]
