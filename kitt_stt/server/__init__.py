"""The network side: shared service state (``state``), one WebSocket session (``connection``) with
its outbound queue (``outbox``), audio-frame checks (``audio_checks``), text-stage updates
(``stage_updates``), the hotword-change budget (``hotword_changes``) and failure reporting
(``failures``); the FastAPI app with health endpoints (``app``), bearer-token checks (``auth``),
the API docs (``api_docs``), uvicorn with graceful drain (``runner``) and its WebSocket protocol
that can reset a client that leaves bytes unread (``ws_transport``). The OpenAI-compatible
upload endpoint: its routes (``openai_routes``), error shape (``openai_errors``), form reader
(``multipart_form``), WAV decoding (``upload_audio``), prompt hotwords and their budget
(``upload_hotwords``), transcription (``file_transcription``) and output formats
(``transcript_formats``)."""
