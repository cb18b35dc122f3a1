"""TurnSense, the audio end-of-turn model: Whisper log-mel features (``features``), the
onnxruntime session with its provider check (``model``), and fetching the model file out of
its PyPI wheel (``fetch``).  The policy that acts on its probability is in ``pipeline/eot.py``."""
