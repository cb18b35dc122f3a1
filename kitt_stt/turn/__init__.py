"""The fused end-of-turn decision (issue 23): what the turn's last second sounds like
(``prosody``), what its words say both ways (``words``; with the English language model's "the
sentence ends here", ``sentence_end``), the feature vector built from those and
the audio model's probability (``features``), the small logistic combiner and its shipped weights
(``combiner``, ``fused_weights.json``), the graded-waiting policy that acts on its confidence
(``fused_policy``), and which policy a connection's seats get (``policy_factory``)."""
