"""Bearer-token checks shared by the WebSocket upgrade, ``/metrics``, the debug endpoints and the API docs.

401 when no token is offered, 403 when a wrong one is; tokens are compared in constant time.
"""

from __future__ import annotations

import hmac

from fastapi import Request, WebSocket
from fastapi.responses import PlainTextResponse, Response


def debug_refusal(request: Request, enabled: bool, token: str | None) -> Response | None:
    """404 when the endpoint is off; 401 without the debug token, 403 with a wrong one."""
    if not enabled or not token:
        return PlainTextResponse("not found", status_code=404)
    return bearer_refusal(request.headers.get("authorization", ""), token)


def bearer_refusal(header: str, token: str) -> PlainTextResponse | None:
    """401 without ``Authorization: Bearer``, 403 with a token other than ``token``."""
    return token_refusal(header[7:].strip() if header.lower().startswith("bearer ") else None, token)


def token_refusal(offered: str | None, token: str) -> PlainTextResponse | None:
    if not offered:
        return PlainTextResponse("unauthorized: bearer token required", status_code=401)
    if not hmac.compare_digest(offered.encode(), token.encode()):
        return PlainTextResponse("forbidden: invalid token", status_code=403)
    return None


def authorisation_failure(websocket: WebSocket, token: str | None) -> PlainTextResponse | None:
    """401 without a token, 403 with a wrong one (``Authorization: Bearer`` or ``?token=``)."""
    if not token:
        return None
    offered = websocket.query_params.get("token")
    header = websocket.headers.get("authorization", "")
    if header.lower().startswith("bearer "):
        offered = header[7:].strip()
    return token_refusal(offered, token)
