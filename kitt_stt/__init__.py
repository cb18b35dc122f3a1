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

from importlib import metadata as _metadata

try:  # one source: the version in pyproject.toml, as installed (the API docs show it)
    __version__ = _metadata.version("kitt-stt")
except _metadata.PackageNotFoundError:  # a source tree on sys.path that was never installed
    __version__ = "0+unknown"
