"""The labelled end-of-turn set (``corpus``: complete turns and turns cut at inner pauses or, by
forced alignment of known transcripts (``align``), mid-sentence at word boundaries, from registry
packages, with a speaker per clip), its features cached per clip (``extract``), and the
deterministic training of the fused decision's weights (``train``), the clip names and AUC they all
score with (``scores``), and the measurement of
whisper-base's own view of the end of a turn (``recognizer_view``, measured, not in the policy)
and of its decoder alone as a text-only sentence-end LM (``text_view``, measured, not adopted),
and how far each family of these signals is from issue 23's targets on held-out speakers
(``targets``)."""
