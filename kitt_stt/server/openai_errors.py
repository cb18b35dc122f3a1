"""Errors of the OpenAI-compatible endpoints, in OpenAI's shape: ``{"error": {"message", "type",
"param", "code"}}``.

OpenAI's clients turn that shape into typed exceptions with a readable message; FastAPI's own
answers (``{"detail": ...}`` for an unknown path, a wrong method, an unreadable request) would
reach them as a bare status with no message, so those are rewritten too, under ``/v1`` only:
every other path keeps FastAPI's default answers.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler, request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException

from kitt_stt.quote import quoted

PREFIX = "/v1"

#: OpenAI's ``code`` for FastAPI's own refusals.
_CODES = {404: "not_found", 405: "method_not_allowed", 422: "invalid_request"}


class ApiError(Exception):
    """A refusal the endpoint answers with ``status`` and OpenAI's error body."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict[str, dict[str, str | None]]:
        return {"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}}

    def response(self, headers: dict[str, str] | None = None) -> JSONResponse:
        return JSONResponse(self.body(), status_code=self.status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    """FastAPI's 404/405/422 under ``/v1`` in OpenAI's shape; elsewhere FastAPI's defaults."""

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> Response:
        if not _under_prefix(request):
            return await http_exception_handler(request, exc)
        message = f"{request.method} {quoted(request.url.path)}: {exc.detail}"
        error = ApiError(exc.status_code, message, code=_CODES.get(exc.status_code))
        return error.response(dict(exc.headers) if exc.headers else None)  # 405 keeps its Allow header

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        if not _under_prefix(request):
            return await request_validation_exception_handler(request, exc)
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(part) for part in first.get("loc", ()))
        return ApiError(422, f"the request could not be read: {where} {quoted(str(first.get('msg', '')))}",
                        param=where or None, code=_CODES[422]).response()


def _under_prefix(request: Request) -> bool:
    path = request.url.path
    return path == PREFIX or path.startswith(PREFIX + "/")
