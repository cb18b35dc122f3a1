"""HTTP(S) downloads for model archives: resumable, with progress, checked, failing fast offline.

A download goes to ``<name>.partial`` beside its destination; an interrupted one is resumed with
a Range request when the server allows it (HTTP 206), restarted otherwise.  Connection problems
fail within ``connect_timeout_s`` with a message that says how to install the model by hand.
"""

from __future__ import annotations

import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from kitt_stt.models.checksums import sha256_file

CHUNK = 1 << 16


class DownloadError(Exception):
    pass


def download(url: str, destination: Path, expected_sha256: str | None = None, connect_timeout_s: float = 10.0,
             manual_hint: str = "") -> str:
    """Fetch ``url`` to ``destination`` (resuming ``.partial``); return the file's sha256."""
    partial = destination.with_name(destination.name + ".partial")
    destination.parent.mkdir(parents=True, exist_ok=True)
    have = partial.stat().st_size if partial.exists() else 0
    request = urllib.request.Request(url, headers={"Range": f"bytes={have}-"} if have else {})
    try:
        response = urllib.request.urlopen(request, timeout=connect_timeout_s)
    except urllib.error.HTTPError as exc:
        if exc.code == 416 and have:  # nothing left to fetch: the partial file is complete
            response = None
        else:
            raise DownloadError(f"{url}: HTTP {exc.code} {exc.reason}. {manual_hint}".strip()) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DownloadError(f"cannot reach {url} ({reason}). {manual_hint}".strip()) from None
    if response is not None:
        with response:
            resumed = response.status == 206
            mode = "ab" if resumed else "wb"
            total = response.length
            done = have if resumed else 0
            if total is not None:
                total += done
            last_report = 0.0
            with partial.open(mode) as handle:
                while block := _read(response, url, manual_hint):
                    handle.write(block)
                    done += len(block)
                    now = time.monotonic()
                    if now - last_report >= 1.0:
                        last_report = now
                        shown = f"{done / 1e6:.1f} MB" + (f" of {total / 1e6:.1f} MB" if total else "")
                        print(f"\r  downloading {destination.name}: {shown}", end="", file=sys.stderr, flush=True)
            if total is not None and done < total:  # the server closed early: keep the part, resume later
                raise DownloadError(f"{url}: connection lost after {done} of {total} bytes; run the command "
                                    f"again to resume. {manual_hint}".strip())
            print(f"\r  downloaded {destination.name}: {done / 1e6:.1f} MB", file=sys.stderr, flush=True)
    digest = sha256_file(partial)
    if expected_sha256 is not None and digest != expected_sha256.lower():
        partial.unlink()
        raise DownloadError(f"{url}: sha256 {digest} does not match the expected {expected_sha256}; the file "
                            "was deleted. Retry; if it persists the source changed or the download is tampered with")
    partial.replace(destination)
    return digest


def _read(response, url: str, manual_hint: str) -> bytes:
    try:
        return response.read(CHUNK)
    except (OSError, urllib.error.URLError) as exc:
        raise DownloadError(f"{url}: connection lost ({exc}); run the command again to resume. "
                            f"{manual_hint}".strip()) from None

