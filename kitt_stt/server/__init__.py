"""The network side: shared service state (``state``), one WebSocket session (``connection``),
the FastAPI app with health endpoints (``app``), and uvicorn with graceful drain (``runner``)."""
