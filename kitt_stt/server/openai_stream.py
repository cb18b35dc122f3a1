"""``stream=true`` on ``POST /v1/audio/transcriptions``: the transcript as server-sent events.

OpenAI's streaming transcription sends ``transcript.text.delta`` events (``{"type", "delta"}``)
while it transcribes and one ``transcript.text.done`` (``{"type", "text"}``) with the whole text at
the end; its clients read them as ``TranscriptionTextDeltaEvent`` / ``TranscriptionTextDoneEvent``.
Here a delta is one decoded piece of the file (a VAD segment), sent as soon as it and the pieces
before it are done, with the separator that joins it to the text so far, so the deltas add up to
the done event's text. A failure after the first event can no longer change the HTTP status: it
comes as an event holding OpenAI's error body, which the clients raise as ``APIError``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from fastapi.responses import StreamingResponse

from kitt_stt.pipeline.text_join import join_texts
from kitt_stt.server.file_transcription import DecodeCancelled, DecodedPiece
from kitt_stt.server.openai_errors import ApiError

log = logging.getLogger(__name__)


def event_stream(pieces: AsyncGenerator[DecodedPiece, None], release: Callable[[], None],
                 headers: dict[str, str]) -> StreamingResponse:
    """The response for ``pieces``; ``release`` runs once the stream has ended, however it ends
    (the upload holds its ``transcriptions.max_concurrent`` slot until then)."""
    return _ReleasingStream(_events(pieces), pieces, release, media_type="text/event-stream",
                            headers={**headers, "cache-control": "no-cache"})


class _ReleasingStream(StreamingResponse):
    """Frees the upload's slot and drops its queued decodes when the response is over. Not in the
    events generator's ``finally``: a client that hangs up before the response starts (while the
    upload is still being read or decoded) makes Starlette cancel the response before the generator
    first runs, and a generator that never ran never runs its ``finally``: the slot was lost."""

    def __init__(self, events: AsyncIterator[bytes], pieces: AsyncGenerator[DecodedPiece, None],
                 release: Callable[[], None], **kwargs: Any) -> None:
        super().__init__(events, **kwargs)
        self._pieces, self._release = pieces, release

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
            await self._pieces.aclose()  # a client gone mid-stream: its queued decodes are dropped


async def _events(pieces: AsyncGenerator[DecodedPiece, None]) -> AsyncIterator[bytes]:
    joined = ""  # the text so far: join_texts works left to right, so joining onto it is the whole join
    try:
        async for decoded in pieces:
            if decoded.segment is None:
                continue
            before, joined = joined, join_texts((joined, decoded.segment.text))
            yield _event({"type": "transcript.text.delta", "delta": joined[len(before):]})
        yield _event({"type": "transcript.text.done", "text": joined})
    except DecodeCancelled as exc:
        yield _event(ApiError(503, str(exc), code="service_unavailable", kind="server_error").body())
    except Exception as exc:  # an engine fault: the client gets a clear error, the live sessions go on
        log.exception("file transcription failed")
        yield _event(ApiError(500, f"decoding failed: {exc}", code="internal", kind="server_error").body())


def _event(data: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()
