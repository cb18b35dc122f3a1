"""OpenAI-compatible HTTP endpoints: ``POST /v1/audio/transcriptions`` and ``GET /v1/models``.

So that code written for OpenAI's transcription API (its official clients, or any tool with a
"base URL" setting) transcribes files on this service unchanged. Uploads share the live
service's model and scheduler, decoded at ``Priority.FILE`` (below every live decode), with the
limits of ``transcriptions:`` in the configuration and the service token
(``server.auth_token``). Errors use OpenAI's shape (:mod:`.openai_errors`), which its clients
turn into typed exceptions. See docs/integrations.md.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from kitt_stt.pipeline.settings import auto_languages
from kitt_stt.quote import quoted
from kitt_stt.server.file_transcription import DecodeCancelled, Transcript, decode_pieces, transcript_of
from kitt_stt.server.multipart_form import BodyTooLarge, FormError, UploadForm, parse_form, read_body
from kitt_stt.server.openai_errors import PREFIX, ApiError
from kitt_stt.server.openai_stream import event_stream
from kitt_stt.server.state import ServiceState
from kitt_stt.server.transcript_formats import ResponseFormat, as_json, as_srt, as_verbose_json, as_vtt
from kitt_stt.server.upload_audio import AudioTooLong, UnsupportedAudio, decode_upload
from kitt_stt.server.upload_hotwords import UploadHotwordChanges, read_prompt
from kitt_stt.text import TextStage

log = logging.getLogger(__name__)

_FORM_SLACK = 64 * 1024  # the other form fields and the multipart framing around the file


def openai_router(state: ServiceState) -> APIRouter:
    router = APIRouter(prefix=PREFIX)
    limits = state.config.transcriptions
    # uploads being read or transcribed now (event loop only): the slot is taken before the body
    # is read, so at most max_concurrent bodies are held in memory; the read deadline frees it
    busy = [0]
    hotword_changes = UploadHotwordChanges(limits.hotword_changes)  # one budget for the whole process

    @router.get("/models")
    async def models(request: Request) -> Response:
        try:
            _authorise(request, state.config.server.auth_token)
        except ApiError as error:
            return error.response()
        info = state.engine.info
        return JSONResponse({"object": "list", "data": [
            {"id": info.name, "object": "model", "created": 0, "owned_by": "kitt-stt",
             "kind": info.kind, "provider": info.provider, "languages": list(info.languages)}]})

    @router.post("/audio/transcriptions")
    async def transcriptions(request: Request) -> Response:
        try:
            _authorise(request, state.config.server.auth_token)
            if not limits.enabled:
                raise ApiError(404, "file transcription is turned off on this server (transcriptions.enabled)",
                               code="not_found")
            if not state.serving or state.draining:
                raise ApiError(503, "the service is not ready (loading its model, failed or shutting down); retry",
                               code="service_unavailable", kind="server_error")
            if busy[0] >= limits.max_concurrent:
                raise ApiError(429, f"this server transcribes at most {limits.max_concurrent} uploads at once; "
                               "retry shortly", code="rate_limit_exceeded", kind="rate_limit_error")
            busy[0] += 1
            slot = _Slot(busy)
            try:
                return await _transcribe(request, state, hotword_changes, slot)
            finally:
                slot.release_unless_streaming()
        except ApiError as error:
            return error.response()

    return router


class _Slot:
    """One upload's place in ``transcriptions.max_concurrent``: freed when the response is made, or
    for a streamed one when its last event has gone (or the client left)."""

    def __init__(self, busy: list[int]) -> None:
        self._busy, self._held, self.streaming = busy, True, False

    def release(self) -> None:
        if self._held:
            self._held = False
            self._busy[0] -= 1

    def release_unless_streaming(self) -> None:
        if not self.streaming:
            self.release()


async def _transcribe(request: Request, state: ServiceState, hotword_changes: UploadHotwordChanges,
                      slot: _Slot) -> Response:
    limits = state.config.transcriptions
    try:
        body = await asyncio.wait_for(read_body(request, limits.max_upload_bytes + _FORM_SLACK),
                                      limits.read_timeout_s)
        form = parse_form(request.headers.get("content-type", ""), body)
    except asyncio.TimeoutError:  # a client trickling its body would hold its slot for ever
        raise ApiError(408, f"the request body did not arrive within {limits.read_timeout_s:g} s "
                       "(transcriptions.read_timeout_s)", code="request_timeout") from None
    except BodyTooLarge:
        raise ApiError(413, f"the upload is larger than this server's limit of {limits.max_upload_bytes} bytes "
                       "(transcriptions.max_upload_bytes)", param="file", code="file_too_large") from None
    except FormError as exc:
        raise ApiError(400, str(exc)) from None
    filename, data = _file(form, limits.max_upload_bytes)
    response_format = _response_format(form)
    stream = _stream(form, response_format)
    language = _language(form, state)
    engine = state.engine
    prompt = read_prompt(form.value("prompt"), limits.max_prompt_hotwords, engine.info.hotwords)
    hotwords = prompt.hotwords
    try:
        samples = await asyncio.to_thread(decode_upload, data, filename, limits.max_audio_s)
    except UnsupportedAudio as exc:
        raise ApiError(400, str(exc), param="file", code="unsupported_audio") from None
    except AudioTooLong as exc:
        raise ApiError(400, f"the audio is {exc.seconds:.1f} s long; this server takes at most "
                       f"{limits.max_audio_s:g} s (transcriptions.max_audio_s)", param="file",
                       code="audio_too_long") from None
    if hotwords:
        hotword_changes.admit(hotwords)  # before the trie is built
        await asyncio.to_thread(engine.prepare_hotwords, hotwords)
    asr = state.config.asr
    headers = {"x-kitt-model": engine.info.name} | ({"x-kitt-prompt": prompt.ignored} if prompt.ignored else {})
    words = "word" in form.values("timestamp_granularities")
    pieces = decode_pieces(samples, state.scheduler, state.config.vad, TextStage(state.config.text), language,
                           asr.use_itn, hotwords, asr.use_itn and engine.info.kind == "sense_voice",
                           auto_languages(asr.auto_languages, engine.info.languages), engine.info.longest_input_ms,
                           words=words and engine.info.words)
    if stream:
        slot.streaming = True
        return event_stream(pieces, slot.release, headers)
    try:
        transcript = await transcript_of(pieces, samples, language)
    except DecodeCancelled as exc:
        raise ApiError(503, str(exc), code="service_unavailable", kind="server_error") from None
    except Exception as exc:  # an engine fault: the client gets a clear 500, the live sessions go on
        log.exception("file transcription failed")
        raise ApiError(500, f"decoding failed: {exc}", code="internal", kind="server_error") from None
    if words and transcript.segments and not transcript.words:
        headers["x-kitt-words"] = "none: this engine does not time words"
    return _render(transcript, response_format, headers, words)


def _authorise(request: Request, token: str | None) -> None:
    """OpenAI's clients send their API key as ``Authorization: Bearer``: set it to the service token."""
    if not token:
        return
    header = request.headers.get("authorization", "")
    offered = header[7:].strip() if header.lower().startswith("bearer ") else ""
    if not offered:
        raise ApiError(401, "missing bearer token (set the client's api_key to the service token)",
                       code="invalid_api_key", kind="authentication_error")
    if not hmac.compare_digest(offered.encode(), token.encode()):
        raise ApiError(403, "invalid token", code="invalid_api_key", kind="authentication_error")


def _file(form: UploadForm, limit: int) -> tuple[str, bytes]:
    upload = form.files.get("file")
    if upload is None:
        raise ApiError(400, "the form has no `file` part", param="file", code="missing_file")
    filename, data = upload
    if len(data) > limit:
        raise ApiError(413, f"the file is larger than this server's limit of {limit} bytes "
                       "(transcriptions.max_upload_bytes)", param="file", code="file_too_large")
    if not data:
        raise ApiError(400, "the uploaded file is empty", param="file", code="empty_file")
    return filename, data


def _response_format(form: UploadForm) -> ResponseFormat:
    value = form.value("response_format") or ResponseFormat.JSON.value
    try:
        return ResponseFormat(value)
    except ValueError:
        raise ApiError(400, f"response_format {value!r} is not one of "
                       f"{', '.join(item.value for item in ResponseFormat)}", param="response_format") from None


def _stream(form: UploadForm, response_format: ResponseFormat) -> bool:
    """``stream``: ``true`` sends OpenAI's ``transcript.text.delta``/``done`` events (json and text
    only, as OpenAI's streaming models do); anything but true or false is refused, not ignored."""
    value = (form.value("stream") or "false").strip().lower()
    if value not in ("true", "false"):
        raise ApiError(400, f"stream must be true or false, not {quoted(value)}", param="stream")
    if value == "true" and response_format not in (ResponseFormat.JSON, ResponseFormat.TEXT):
        raise ApiError(400, f"stream=true sends transcript.text.delta/done events, which have no "
                       f"{response_format.value} form: use response_format json or text, or stream=false",
                       param="stream")
    return value == "true"


def _language(form: UploadForm, state: ServiceState) -> str:
    value = form.value("language") or state.config.asr.language
    languages = state.engine.info.languages
    if value not in languages:
        raise ApiError(400, f"language {quoted(value)} is not supported by this model; "
                       f"use one of {', '.join(languages)}", param="language", code="unsupported_language")
    return value


def _render(transcript: Transcript, response_format: ResponseFormat, headers: dict[str, str],
            words: bool) -> Response:
    model = headers["x-kitt-model"]
    body: Any
    if response_format is ResponseFormat.TEXT:
        return PlainTextResponse(transcript.text + "\n", headers=headers)
    if response_format is ResponseFormat.SRT:
        return PlainTextResponse(as_srt(transcript), headers=headers)
    if response_format is ResponseFormat.VTT:
        return PlainTextResponse(as_vtt(transcript), media_type="text/vtt", headers=headers)
    body = as_verbose_json(transcript, model, words) if response_format is ResponseFormat.VERBOSE_JSON \
        else as_json(transcript, model)
    return JSONResponse(body, headers=headers)
