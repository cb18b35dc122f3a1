"""kitt-stt: streaming speech-to-text for in-car voice assistants.

Subpackages, by concern: ``config`` (schema and loader), ``protocol`` (wire frames), ``audio``
(VAD, buffers, WAV), ``asr`` (engines and model checks), ``scheduler`` (inference queue),
``pipeline`` (per-seat segments and turns), ``server`` (FastAPI/uvicorn), ``client`` (Python
client and ``transcribe``), ``models`` (registry and the synthetic tone model).
"""

__version__ = "0.1.0"
