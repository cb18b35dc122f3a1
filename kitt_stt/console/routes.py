"""The console's routes: the page, its static files, the vendored msgpack build, its settings.

The page reads ``settings.json`` rather than having the WebSocket path or the allowed languages
written into it, so it follows the configuration without templating. The msgpack library is
served from the git-ignored ``node_modules/`` that ``npm ci`` fills; when it is missing the route
answers 404 with the fix, the page shows the same, and start-up logs a warning.

Every console response says ``Cache-Control: no-cache`` (a browser revalidates, so it never runs
an old module under a new page) and carries the security headers in ``CONSOLE_HEADERS``: the page
may load scripts, styles, its AudioWorklet and fetches only from this service, and open
WebSockets only to it.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException
from starlette.staticfiles import NotModifiedResponse
from starlette.types import Scope

from kitt_stt.config.schema import AppConfig

log = logging.getLogger(__name__)

CONSOLE_PATH = "/console/"
READ_METHODS = ["GET", "HEAD"]
HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
MSGPACK_DIR = HERE / "node_modules" / "@msgpack" / "msgpack"
#: URL name under /console/vendor/ -> file of the npm package; the licence travels with the code.
VENDOR_FILES = {"msgpack.min.js": Path("dist.umd/msgpack.min.js"), "msgpack-LICENSE.txt": Path("LICENSE")}
INSTALL_HINT = ("run `make console` (or `npm ci --prefix kitt_stt/console --ignore-scripts`) in the repository "
                "to install it from the npm registry")
#: Everything the page loads comes from this service; ``'self'`` in ``connect-src`` covers ws:// and
#: wss:// to the page's own host and port (CSP level 3), the only WebSocket the page opens. The
#: page has no inline script or style and evaluates no strings; the favicon is a ``data:`` URL.
CONTENT_SECURITY_POLICY = "; ".join([
    "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data:", "connect-src 'self'",
    "worker-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
])
CONSOLE_HEADERS = {
    # The page changes with the package; a browser must not run an old console against a new
    # server, nor old modules under a new page: it revalidates (ETag / Last-Modified) every time.
    "Cache-Control": "no-cache",
    "X-Content-Type-Options": "nosniff",
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "Referrer-Policy": "no-referrer",
}


def mount_console(app: FastAPI, config: AppConfig, msgpack_dir: Path = MSGPACK_DIR) -> None:
    """Serve the console at ``/console/`` (``/`` and ``/console`` redirect there)."""
    library = msgpack_dir / VENDOR_FILES["msgpack.min.js"]
    if library.is_file():
        log.info("browser console at %s on this server (docs/console.md)", CONSOLE_PATH)
    else:
        # the log (for the operator) names the file; the HTTP answer (for anyone) does not
        log.warning("browser console at %s cannot work: %s is missing; %s", CONSOLE_PATH, library, INSTALL_HINT)
    settings = {
        "path": config.server.path,
        "auth_required": bool(config.server.auth_token),
        "languages": list(config.asr.languages),
        "language": config.asr.language,
        "auto_languages": list(config.asr.auto_languages),  # what "auto" may detect, for the menu's label
        "interim": config.interim.enabled,
        "wake": {"phrases": list(config.wake.phrases), "mode": str(config.wake.mode)},
    }

    static = ConsoleStaticFiles(directory=STATIC_DIR)

    def file(path: Path, request: Request, media_type: str | None = None) -> Response:
        """``path`` with the console's headers, or 304 when the browser's copy is current."""
        response = FileResponse(path, media_type=media_type, stat_result=path.stat(), headers=CONSOLE_HEADERS)
        return static.not_modified(response, request.headers) or response

    # GET and HEAD alike (a HEAD is how monitors and `curl -I` check that the console is up)
    @app.api_route("/", methods=READ_METHODS, include_in_schema=False)
    @app.api_route("/console", methods=READ_METHODS, include_in_schema=False)
    async def to_console() -> RedirectResponse:
        return RedirectResponse(CONSOLE_PATH, headers=CONSOLE_HEADERS)

    @app.api_route(CONSOLE_PATH, methods=READ_METHODS, include_in_schema=False)
    async def console_page(request: Request) -> Response:
        return file(STATIC_DIR / "index.html", request)

    @app.api_route(CONSOLE_PATH + "settings.json", methods=READ_METHODS, include_in_schema=False)
    async def console_settings() -> JSONResponse:
        return JSONResponse(settings, headers=CONSOLE_HEADERS)

    @app.api_route(CONSOLE_PATH + "vendor/{name}", methods=READ_METHODS, include_in_schema=False)
    async def console_vendor(name: str, request: Request) -> Response:
        relative = VENDOR_FILES.get(name)
        if relative is None:
            return PlainTextResponse("not found", status_code=404, headers=CONSOLE_HEADERS)
        path = msgpack_dir / relative
        if not path.is_file():
            missing = f"the console's msgpack library ({name}) is missing on this server: {INSTALL_HINT}"
            return PlainTextResponse(missing, status_code=404, headers=CONSOLE_HEADERS)
        return file(path, request, "text/javascript" if name.endswith(".js") else "text/plain")

    app.mount(CONSOLE_PATH + "static", static, name="console-static")


class ConsoleStaticFiles(StaticFiles):
    """The page's own files, with the console's headers on every answer (304 and 404 included)."""

    async def get_response(self, path: str, scope: Scope) -> Response:
        try:
            response = await super().get_response(path, scope)
        except HTTPException as exc:
            response = PlainTextResponse(exc.detail, status_code=exc.status_code, headers=exc.headers)
        response.headers.update(CONSOLE_HEADERS)
        return response

    def not_modified(self, response: Response, request_headers: Headers) -> Response | None:
        """A 304 for ``response`` (a FileResponse with its stat headers) when the browser's copy is current."""
        if not self.is_not_modified(response.headers, request_headers):
            return None
        answer = NotModifiedResponse(response.headers)
        answer.headers.update(CONSOLE_HEADERS)
        return answer
