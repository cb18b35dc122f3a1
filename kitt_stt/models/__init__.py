"""Models the service can run: the registry and cache (``registry``), downloads (``download``,
``pypi``, ``sensevoice_release``, ``whisper_release``), checksums (``checksums``), ONNX metadata
(``onnx_metadata``), the CTranslate2 -> sherpa-onnx Whisper converter (``ct2_reader``,
``whisper_vocab``, ``whisper_export``), the end-of-turn text model from its GGUF (``smollm_release``,
``llama_export``, ``gguf_blocks``), the synthetic tone model for tests (``tone_model``, its timing and
confidence in ``tone_timing``) with its speech synthesizer (``tone_synth``), and the SenseVoice-shaped benchmark model
(``sensevoice_bench``)."""
