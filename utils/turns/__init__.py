"""The labelled end-of-turn set (``corpus``: complete turns and turns cut at inner pauses or, by
forced alignment of known transcripts (``align``), mid-sentence at word boundaries, from registry
packages, with a speaker per clip), its features cached per clip (``extract``), the text view's
development set, on which the shipped weights are fitted and the commit threshold is chosen
(``text_dev``: the phrase table, complete and cut half way), the deterministic training of the
fused decision's weights (``train``), the clip names and AUC they all score with (``scores``), the
measurement of whisper-base's own view of the end of a turn (``recognizer_view``, measured, not
in the policy), and how far each family of these signals is from issue 23's targets on held-out
speakers (``targets``)."""
