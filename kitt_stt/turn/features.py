"""The fused decision's feature vector: one list of floats, built the same way by the training
script (``utils/turns/train.py``, from cached clips) and by the policy (from the seat's ring).

The model's probability enters as a clipped logit, so the combiner can weigh how sure it is;
``silence_s`` is how long the pause had lasted when the model looked: silence itself is evidence.
``text_end`` is the text view's log-odds that the user's message ends after these words
(``text_model.py``; NaN, "no opinion", without words or without the model: the combiner then
leaves it out). Chosen by leave-one-speaker-out AUC on the labelled set (``utils/turns/train.py
--compare``, docs/turns.md; so the choice saw every speaker): the word count is left out (cut
turns are shorter than complete ones by construction, so it learns the corpus, not the speaker),
and so are final punctuation (Whisper punctuates cut phrases too), the pitch slope, energy decay
and final lengthening, which did not help held-out speakers there. They stay candidates
(``KINDS``): the weights file names its features, so a re-fit on other recordings can choose again.
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
