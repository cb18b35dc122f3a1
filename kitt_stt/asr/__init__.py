"""Speech recognition: the engine interface (``engine``), SenseVoice model-directory checks
(``sense_voice_model``), the sherpa-onnx SenseVoice engine (``sherpa_sense_voice``), the front end
(``features``), text clean-up (``text``) and engine construction from config (``factory``)."""
