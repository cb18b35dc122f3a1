"""Observability: the Chrome-trace tracer (``trace``), Prometheus metrics (``metrics``), the
in-memory debug log ring and log context (``logbuffer``), secrets kept out of log lines (``redact``)."""
