"""The fused end-of-turn decision (issues 23, 35): the text view, a small chat model's "the user's
message ends here" on the turn's words (``text_model``), what the words say by rule both ways
(``words``), what the turn's last second sounds like (``prosody``), the feature vector built from
those and the audio model's probability (``features``), the small logistic combiner and its shipped
weights (``combiner``, ``fused_weights.json``), the graded-waiting policy that acts on its
confidence (``fused_policy``), and which policy a connection's seats get (``policy_factory``)."""
