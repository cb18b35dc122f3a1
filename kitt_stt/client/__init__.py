"""The Python client: an async WebSocket session (``session``) and the ``transcribe`` command's
file streaming (``transcribe``)."""

from kitt_stt.client.session import SttSession, connect

__all__ = ["SttSession", "connect"]
