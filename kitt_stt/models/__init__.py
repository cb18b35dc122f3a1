"""Models the service can run: the registry and cache (``registry``), and the synthetic tone
model for tests (``tone_model``) with its speech synthesizer (``tone_synth``)."""
