"""The browser console's serving side (docs/console.md): the page and every file it loads come
from the service itself (no CDN, no build step), ``server.console`` turns it on and off (on in
``config.yaml``, off in the Kubernetes overlays), and a missing msgpack library is reported, not
hidden. The page in a real browser: ``tests/test_console_browser.py``."""

from __future__ import annotations

import http.client
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo
from kitt_stt.config.loader import load_config
from kitt_stt.config.schema import AppConfig
from kitt_stt.console.routes import (
    CONSOLE_HEADERS,
    INSTALL_HINT,
    MSGPACK_DIR,
    STATIC_DIR,
    VENDOR_FILES,
    mount_console,
)
from kitt_stt.server.app import create_app
from tests.helpers import RunningServer

ROOT = Path(__file__).resolve().parent.parent
#: The only absolute URL in the page's files: SVG's namespace name, which is never fetched.
SVG_NAMESPACE = "http://www.w3.org/2000/svg"


class SilentEngine(AsrEngine):
    info = EngineInfo(name="fake", kind="fake", provider="cpu")

    def decode_batch(self, requests: Sequence[AsrRequest], timer=None) -> list[AsrResult]:
        return [AsrResult(text="") for _ in requests]


def app_with(console: bool, **server: object):
    config = AppConfig.model_validate({"turn": {"model": None}, "server": {"console": console, **server}})
    return create_app(config, SilentEngine())


def references(path: Path) -> list[tuple[str, str]]:
    """What a page file makes the browser load, each with the URL it is relative to: src/href in
    the HTML and fetches (the document's URL); imports and ``new URL`` in modules, CSS ``url()``
    (the file's own URL)."""
    text = path.read_text()
    page, own = "/console/", "/console/static/"
    if path.suffix == ".html":
        return [(found, page) for found in re.findall(r'(?:src|href)="([^"]+)"', text)]
    if path.suffix == ".js":
        return [(found, page) for found in re.findall(r'fetch\(\s*"([^"]+)"', text)] + \
               [(found, own) for found in re.findall(r'(?:from|import\(|new URL\()\s*"([^"]+)"', text)]
    return [(found, own) for found in re.findall(r"url\(([^)]+)\)", text)]


def test_the_page_and_everything_it_loads_come_from_the_service(server: RunningServer) -> None:
    with httpx.Client(base_url=server.http) as client:
        for entry in ("/", "/console"):
            moved = client.get(entry)
            assert moved.status_code == 307 and moved.headers["location"] == "/console/"
        page = client.get("/console/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "msgpack" in page.text and "kitt-stt console" in page.text
        settings = client.get("/console/settings.json").json()
        assert settings == {"path": "/stt/sensevoice", "auth_required": False,
                            "languages": ["auto", "zh", "en", "yue", "ja", "ko"], "language": "auto",
                            "auto_languages": ["zh", "en"], "interim": True, "wake": {"phrases": [], "mode": "off"}}
        loaded = set()
        for path in sorted(STATIC_DIR.iterdir()):
            assert path.suffix in {".html", ".js", ".css"}, f"{path.name}: unexpected file in static/"
            text = path.read_text()
            assert set(re.findall(r"https?://[^\s\"'`)]+", text)) <= {SVG_NAMESPACE}, path.name
            assert "//cdn" not in text and "@import" not in text, path.name
            for reference, base in references(path):
                if reference.startswith("data:"):
                    continue
                assert not re.match(r"^([a-z]+:)?//", reference), f"{path.name} loads {reference} from elsewhere"
                url = httpx.URL(server.http + base).join(reference)
                answer = client.get(url)
                assert answer.status_code == 200, f"{path.name} -> {reference}: {answer.status_code}"
                loaded.add(url.path)
        # the HTML, every module and the worklet, the library and its licence are all reached
        expected = {f"/console/static/{p.name}" for p in STATIC_DIR.iterdir() if p.suffix in {".js", ".css"}}
        assert expected | {"/console/vendor/msgpack.min.js", "/console/vendor/msgpack-LICENSE.txt",
                           "/console/settings.json"} <= loaded
        library = client.get("/console/vendor/msgpack.min.js")
        assert "javascript" in library.headers["content-type"] and "MessagePack" in library.text
        assert client.get("/console/vendor/package.json").status_code == 404  # only the files listed


def test_the_msgpack_library_is_the_pinned_npm_release() -> None:
    """Installed by `npm ci` from the committed lock file (exact version, integrity hash)."""
    lock = (ROOT / "kitt_stt" / "console" / "package-lock.json").read_text()
    entry = re.search(r'"node_modules/@msgpack/msgpack": \{[^}]*"version": "([^"]+)"[^}]*"integrity": "(sha512-[^"]+)"',
                      lock)
    assert entry is not None, "package-lock.json pins no @msgpack/msgpack with an integrity hash"
    manifest = (ROOT / "kitt_stt" / "console" / "package.json").read_text()
    assert f'"@msgpack/msgpack": "{entry.group(1)}"' in manifest, "package.json must ask for the exact version"
    installed = MSGPACK_DIR / "package.json"
    assert installed.is_file(), f"{MSGPACK_DIR} is missing: {INSTALL_HINT}"
    assert f'"version": "{entry.group(1)}"' in installed.read_text()


async def test_server_console_false_serves_no_page() -> None:
    transport = httpx.ASGITransport(app=app_with(console=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://kitt") as client:
        for path in ("/", "/console", "/console/", "/console/settings.json", "/console/static/console.js",
                     "/console/vendor/msgpack.min.js"):
            assert (await client.get(path)).status_code == 404, path
        assert (await client.get("/healthz")).status_code == 200


async def test_settings_tell_the_page_that_a_token_is_needed_but_not_the_token() -> None:
    transport = httpx.ASGITransport(app=app_with(console=True, auth_token="s3cret", path="/asr"))
    async with httpx.AsyncClient(transport=transport, base_url="http://kitt") as client:
        answer = await client.get("/console/settings.json")
    assert answer.json()["auth_required"] is True and answer.json()["path"] == "/asr"
    assert "s3cret" not in answer.text


async def test_a_missing_library_is_reported_at_start_up_and_by_the_route(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from fastapi import FastAPI

    app = FastAPI()
    with caplog.at_level(logging.WARNING, logger="kitt_stt.console.routes"):
        mount_console(app, AppConfig.model_validate({"turn": {"model": None}}), msgpack_dir=tmp_path / "absent")
    assert "cannot work" in caplog.text and "npm ci --prefix kitt_stt/console" in caplog.text
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://kitt") as client:
        for name in VENDOR_FILES:
            answer = await client.get(f"/console/vendor/{name}")
            assert answer.status_code == 404 and "is missing" in answer.text, answer.text
            assert "make console" in answer.text and "npm ci --prefix kitt_stt/console --ignore-scripts" in answer.text
            # what to run, not where the server's files are
            assert str(tmp_path) not in answer.text and "/node_modules" not in answer.text, answer.text
        assert (await client.get("/console/")).status_code == 200  # the page itself says what is wrong


#: Every console URL, answered or not.
CONSOLE_URLS = ("/", "/console", "/console/", "/console/settings.json", "/console/static/console.js",
                "/console/static/capture-worklet.js", "/console/static/console.css", "/console/vendor/msgpack.min.js",
                "/console/vendor/msgpack-LICENSE.txt", "/console/static/absent.js", "/console/vendor/absent.js")


async def test_every_console_answer_is_revalidated_and_carries_the_security_headers() -> None:
    """A browser must not run old modules under a new page (no-cache: it revalidates, cheaply, with
    the ETag), and the page may load code only from this service (CSP)."""
    transport = httpx.ASGITransport(app=app_with(console=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://kitt") as client:
        for path in CONSOLE_URLS:
            answer = await client.get(path)
            assert answer.status_code in (200, 307, 404), path
            for name, value in CONSOLE_HEADERS.items():
                assert answer.headers.get(name) == value, (path, name, answer.headers)
        for path in ("/console/", "/console/static/console.js", "/console/vendor/msgpack.min.js"):
            first = await client.get(path)
            assert first.headers["etag"] and first.headers["last-modified"], path
            again = await client.get(path, headers={"If-None-Match": first.headers["etag"]})
            assert again.status_code == 304 and again.content == b"", path
            assert again.headers["cache-control"] == "no-cache" and again.headers["etag"] == first.headers["etag"]
            since = await client.get(path, headers={"If-Modified-Since": first.headers["last-modified"]})
            assert since.status_code == 304, path
            stale = await client.get(path, headers={"If-None-Match": '"not-this-one"'})
            assert stale.status_code == 200 and stale.content == first.content, path


def test_the_content_security_policy_allows_only_this_service() -> None:
    policy = dict(directive.split(" ", 1) for directive in CONSOLE_HEADERS["Content-Security-Policy"].split("; "))
    assert policy["default-src"] == "'none'"
    # scripts (the modules, the AudioWorklet, the msgpack build), styles, fetches and the WebSocket
    # ('self' covers ws:// and wss:// to the page's host): this service only, nothing inline
    for directive in ("script-src", "style-src", "connect-src", "worker-src"):
        assert policy[directive] == "'self'", directive
    assert policy["img-src"] == "'self' data:"  # the favicon is data:,
    assert policy["frame-ancestors"] == "'none'"
    assert CONSOLE_HEADERS["X-Content-Type-Options"] == "nosniff"
    assert CONSOLE_HEADERS["Referrer-Policy"] == "no-referrer"
    # ...which the page's files keep to: no inline script, handler or style
    page = (STATIC_DIR / "index.html").read_text()
    assert re.findall(r"<script(?![^>]*\bsrc=)", page) == [] and "style=" not in page and "<style" not in page
    assert not re.search(r"\son[a-z]+=", page)
    for path in STATIC_DIR.glob("*.js"):
        text = path.read_text()
        for refused in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function",
                        '"style"', ".style."):
            assert refused not in text, f"{path.name} uses {refused}"


def raw_get(server: RunningServer, target: str) -> int:
    """GET ``target`` exactly as written (no client normalises its dots or escapes)."""
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request("GET", target)
        return connection.getresponse().status
    finally:
        connection.close()


def test_no_path_leads_out_of_the_console_folders(server: RunningServer) -> None:
    assert raw_get(server, "/console/static/console.js") == 200
    for target in ("/console/static/%2e%2e/routes.py", "/console/static/..%2froutes.py",
                   "/console/static/%2E%2E%2F__init__.py", "/console/static/..%2f..%2fconsole%2froutes.py",
                   "/console/static/%2e%2e/%2e%2e/config/schema.py", "/console/static/..%5croutes.py",
                   "/console/static/%2fetc%2fpasswd", "/console/vendor/..%2fpackage.json",
                   "/console/vendor/%2e%2e%2f%2e%2e%2froutes.py", "/console/static/../routes.py"):
        assert raw_get(server, target) == 404, target


def test_on_in_the_base_config_off_in_the_kubernetes_overlays() -> None:
    assert load_config(ROOT / "config.yaml").config.server.console is True
    for overlay in ("config-k8s.yaml", "config-k3s-orin.yaml"):
        assert load_config(ROOT / overlay).config.server.console is False, overlay
