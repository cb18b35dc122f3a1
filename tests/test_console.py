"""The browser console's serving side (docs/console.md): the page and every file it loads come
from the service itself (no CDN, no build step), ``server.console`` turns it on and off (on in
``config.yaml``, off in the Kubernetes overlays), and a missing msgpack library is reported, not
hidden. The page in a real browser: ``tests/test_console_browser.py``."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from pathlib import Path

import httpx
import pytest

from kitt_stt.asr.engine import AsrEngine, AsrRequest, AsrResult, EngineInfo
from kitt_stt.config.loader import load_config
from kitt_stt.config.schema import AppConfig
from kitt_stt.console.routes import INSTALL_HINT, MSGPACK_DIR, STATIC_DIR, VENDOR_FILES, mount_console
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
                            "interim": True}
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
            assert answer.status_code == 404 and "is missing" in answer.text and "make serve" in answer.text
        assert (await client.get("/console/")).status_code == 200  # the page itself says what is wrong


def test_on_in_the_base_config_off_in_the_kubernetes_overlays() -> None:
    assert load_config(ROOT / "config.yaml").config.server.console is True
    for overlay in ("config-k8s.yaml", "config-k3s-orin.yaml"):
        assert load_config(ROOT / overlay).config.server.console is False, overlay
