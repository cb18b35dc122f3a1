"""The HTTP API's description: ``/openapi.json``, ``/docs`` and ``/redoc`` (``server.api_docs``).

FastAPI serves these openly by default, which told anyone the endpoints of a server whose
clients all need a token.  Here, when ``server.auth_token`` is set, each answers only a request
with ``Authorization: Bearer <token>`` (401/403 otherwise; a browser that cannot send the header
gets the spec with curl instead).  The Kubernetes configs turn them off.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import JSONResponse, Response

from kitt_stt.config.server_config import ServerConfig
from kitt_stt.server.auth import bearer_refusal

OPENAPI_PATH = "/openapi.json"


def mount_api_docs(app: FastAPI, server: ServerConfig) -> None:
    """Serve the three routes (not themselves in the schema) behind ``server.auth_token`` when set."""
    token = server.auth_token

    def refusal(request: Request) -> Response | None:
        return bearer_refusal(request.headers.get("authorization", ""), token) if token else None

    @app.get(OPENAPI_PATH, include_in_schema=False)
    async def openapi(request: Request) -> Response:
        return refusal(request) or JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> Response:
        return refusal(request) or get_swagger_ui_html(openapi_url=OPENAPI_PATH, title=f"{app.title} - docs")

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> Response:
        return refusal(request) or get_redoc_html(openapi_url=OPENAPI_PATH, title=f"{app.title} - ReDoc")
