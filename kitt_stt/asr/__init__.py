"""Speech recognition: the engine interface (``engine``); our onnxruntime SenseVoice engine
(``ort_sense_voice``) with its front end (``features``), execution providers (``providers``) and
CTC decoding with hotwords (``ctc``), each token's frames and posterior (``token_timing``) and
the words they make (``words``); the sherpa-onnx engines, SenseVoice as the reference
(``sherpa_sense_voice``) and Whisper (``sherpa_whisper``); model-directory checks
(``sense_voice_model``, ``whisper_model``, ``onnx_header``); text clean-up (``text``); language
detection restricted to a set, once per segment and kept per turn (``language``), with Whisper's
language step (``whisper_language``); and engine construction from config (``factory``)."""
