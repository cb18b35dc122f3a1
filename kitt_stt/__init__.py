"""kitt-stt: streaming speech-to-text for in-car voice assistants.

Subpackages, by concern: ``config`` (schema and loader), ``protocol`` (wire frames), ``audio``
(VAD, buffers, WAV), ``asr`` (engines, decoding, model checks), ``scheduler`` (inference queue),
``pipeline`` (per-seat segments, chunks and turns), ``turnsense`` (the end-of-turn model),
``turn`` (the fused end-of-turn decision), ``text`` (script, wake phrases, ITN),
``server`` (FastAPI/uvicorn), ``client`` (Python client and ``transcribe``), ``models``
(registry, downloads, generated models), ``observability`` (trace, metrics, debug logs, log
redaction), ``ops`` (host probes, the TensorRT engine cache, ``doctor``), ``console`` (the
browser console), ``integrations`` (pipecat and LiveKit adapters).
Top-level modules: ``cli`` (the ``kitt-stt`` command; ``cli_models`` its ``models`` subcommands,
``cli_common`` what they share), ``hotwords`` (hotword syntax), ``logs``,
``quote`` (client text in messages, bounded).
"""

import os as _os
from importlib import metadata as _metadata

# onnxruntime's telemetry (its 1DS client, on Linux too) writes a device id and an event database
# under $HOME/.cache/Microsoft at every import, and warns when it cannot (a read-only root, HOME
# unset). Its switch is this variable, read when onnxruntime is first imported, which is why it is
# set here, before any kitt_stt module imports it; ``onnxruntime.disable_telemetry_events()`` comes
# after that import and does not stop the files. An operator who wants the telemetry sets it to 0.
_os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")

try:  # one source: the version in pyproject.toml, as installed (the API docs show it)
    __version__ = _metadata.version("kitt-stt")
except _metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
