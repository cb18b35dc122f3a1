"""A bounded ``multipart/form-data`` reader for the upload endpoint.

Why not Starlette's ``request.form()``: it needs ``python-multipart``, which is not among the core
dependencies, and it spools the whole upload before a size limit could refuse it. Here the body
is read with a cap (the upload is refused as soon as it passes it) and split on its boundary.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fastapi import Request

_BOUNDARY = re.compile(r'boundary="?([^";]+)"?', re.IGNORECASE)
_NAME = re.compile(r'\bname="([^"]*)"', re.IGNORECASE)
_FILENAME = re.compile(r'\bfilename="([^"]*)"', re.IGNORECASE)


class FormError(ValueError):
    """The request body is not a form this endpoint can read."""


class BodyTooLarge(ValueError):
    pass


@dataclass
class UploadForm:
    fields: dict[str, list[str]] = field(default_factory=dict)
    files: dict[str, tuple[str, bytes]] = field(default_factory=dict)  # name -> (filename, content)

    def value(self, name: str) -> str | None:
        values = self.fields.get(name)
        return values[-1] if values else None

    def values(self, name: str) -> list[str]:
        """A repeated field; OpenAI's clients write lists as ``name[]``."""
        return self.fields.get(name, []) + self.fields.get(f"{name}[]", [])


async def read_body(request: Request, limit: int) -> bytes:
    """The whole body, refusing it (``BodyTooLarge``) as soon as it is longer than ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise BodyTooLarge(int(declared))
    received = bytearray()
    async for piece in request.stream():
        received += piece
        if len(received) > limit:
            raise BodyTooLarge(len(received))
    return bytes(received)


def parse_form(content_type: str, body: bytes) -> UploadForm:
    if not content_type.lower().startswith("multipart/form-data"):
        raise FormError(f"expected a multipart/form-data body, got {content_type or 'no Content-Type'}")
    match = _BOUNDARY.search(content_type)
    if match is None:
        raise FormError("the multipart Content-Type has no boundary")
    delimiter = b"--" + match.group(1).encode("latin-1")
    form = UploadForm()
    for part in body.split(delimiter)[1:]:
        if part.startswith(b"--"):
            break  # the closing delimiter
        head, separator, content = part.partition(b"\r\n\r\n")
        if not separator:
            raise FormError("a form part has no header/body separator")
        content = content[:-2] if content.endswith(b"\r\n") else content
        headers = head.decode("utf-8", errors="replace")
        disposition = next((line for line in headers.split("\r\n")
                            if line.lower().startswith("content-disposition:")), "")
        name = _NAME.search(disposition)
        if name is None:
            raise FormError("a form part has no Content-Disposition name")
        filename = _FILENAME.search(disposition)
        if filename is not None:
            form.files[name.group(1)] = (filename.group(1), content)
        else:
            form.fields.setdefault(name.group(1), []).append(content.decode("utf-8", errors="replace"))
    return form
