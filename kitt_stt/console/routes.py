"""The console's routes: the page, its static files, the vendored msgpack build, its settings.

The page reads ``settings.json`` rather than having the WebSocket path or the allowed languages
written into it, so it follows the configuration without templating. The msgpack library is
served from the git-ignored ``node_modules/`` that ``npm ci`` fills; when it is missing the route
answers 404 with the fix, the page shows the same, and start-up logs a warning.
"""

from __future__ import annotations

import logging
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles

from kitt_stt.config.schema import AppConfig

log = logging.getLogger(__name__)

CONSOLE_PATH = "/console/"
HERE = Path(__file__).resolve().parent
STATIC_DIR = HERE / "static"
MSGPACK_DIR = HERE / "node_modules" / "@msgpack" / "msgpack"
#: URL name under /console/vendor/ -> file of the npm package; the licence travels with the code.
VENDOR_FILES = {"msgpack.min.js": Path("dist.umd/msgpack.min.js"), "msgpack-LICENSE.txt": Path("LICENSE")}
INSTALL_HINT = "run `make serve` (or `npm ci --prefix kitt_stt/console`) to install it from the npm registry"
#: The page changes with the package; a browser must not run an old console against a new server.
NO_CACHE = {"Cache-Control": "no-cache"}


def mount_console(app: FastAPI, config: AppConfig, msgpack_dir: Path = MSGPACK_DIR) -> None:
    """Serve the console at ``/console/`` (``/`` and ``/console`` redirect there)."""
    library = msgpack_dir / VENDOR_FILES["msgpack.min.js"]
    if library.is_file():
        log.info("browser console at %s on this server (docs/console.md)", CONSOLE_PATH)
    else:
        log.warning("browser console at %s cannot work: %s is missing; %s", CONSOLE_PATH, library, INSTALL_HINT)
    settings = {
        "path": config.server.path,
        "auth_required": bool(config.server.auth_token),
        "languages": list(config.asr.languages),
        "language": config.asr.language,
        "interim": config.interim.enabled,
    }

    @app.get("/", include_in_schema=False)
    @app.get("/console", include_in_schema=False)
    async def to_console() -> RedirectResponse:
        return RedirectResponse(CONSOLE_PATH)

    @app.get(CONSOLE_PATH, include_in_schema=False)
    async def console_page() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html", headers=NO_CACHE)

    @app.get(CONSOLE_PATH + "settings.json", include_in_schema=False)
    async def console_settings() -> JSONResponse:
        return JSONResponse(settings, headers=NO_CACHE)

    @app.get(CONSOLE_PATH + "vendor/{name}", include_in_schema=False)
    async def console_vendor(name: str) -> Response:
        relative = VENDOR_FILES.get(name)
        if relative is None:
            return PlainTextResponse("not found", status_code=404)
        path = msgpack_dir / relative
        if not path.is_file():
            return PlainTextResponse(f"{path} is missing: {INSTALL_HINT}", status_code=404)
        return FileResponse(path, media_type="text/javascript" if name.endswith(".js") else "text/plain")

    app.mount(CONSOLE_PATH + "static", StaticFiles(directory=STATIC_DIR), name="console-static")
