"""Install the official sherpa-onnx SenseVoice release (``kitt-stt models pull sensevoice``).

The archive is downloaded over HTTPS (``models.sensevoice_url``) and checked against a sha256
before anything is unpacked: ``models.sensevoice_sha256`` when one is configured, else, for the
official release URL, the release's own digest pinned here (``OFFICIAL_SHA256``), so a pull of the
official archive is never installed unverified.  Any other URL without a configured digest is
refused: an unverified model would be served to every car.  Members are unpacked with every path
checked and only the model files are kept; the result is validated like any SenseVoice directory
before it is marked installed.
"""

from __future__ import annotations

import shutil
import sys
import tarfile
from pathlib import Path

from kitt_stt.asr.sense_voice_model import load_sense_voice_model
from kitt_stt.models.checksums import sha256_file
from kitt_stt.models.download import DownloadError, download

RELEASE = "sherpa-onnx-sense-voice-zh-en-ja-ko-yue-2024-07-17"
DEFAULT_URL = f"https://github.com/k2-fsa/sherpa-onnx/releases/download/asr-models/{RELEASE}.tar.bz2"
#: sha256 of DEFAULT_URL's archive (1,047,870,769 bytes). Not downloaded here (no internet where this
#: was written): it is the value several independent public projects record for this exact file
#: and size, one of them from two separate downloads. Check it on a machine with internet access:
#: curl -LO <DEFAULT_URL> && sha256sum <RELEASE>.tar.bz2 (docs/models.md).
OFFICIAL_SHA256 = "f6b2a72ebcb1ac7a764d4cfccd886e6bcb2a95c4657c2199d0ba95ed4b9ea71a"
KEEP = ("model.int8.onnx", "model.onnx", "tokens.txt", "LICENSE", "README.md")
MANUAL = (
    "To install it by hand: on a machine with internet access download "
    f"{DEFAULT_URL}, unpack it, copy the directory (model.int8.onnx, tokens.txt) to this machine and set "
    "asr.model to its path (docs/models.md)."
)


def expected_sha256(url: str, configured: str | None) -> str:
    """The digest the archive must have: the configured one, else the official release's own."""
    if configured:
        return configured.lower()
    if url == DEFAULT_URL:
        return OFFICIAL_SHA256
    raise DownloadError(f"{url} is not the official SenseVoice release and models.sensevoice_sha256 is not set: "
                        "refusing to install an unverified model. Set models.sensevoice_sha256 to the archive's "
                        "sha256 (sha256sum of the file you trust).")


def fetch_sensevoice(out_dir: Path, url: str = DEFAULT_URL, sha256: str | None = None,
                     downloads: Path | None = None) -> dict[str, str]:
    downloads = downloads or out_dir.parent
    archive = downloads / f"{RELEASE}.tar.bz2"
    digest = download(url, archive, expected_sha256(url, sha256), manual_hint=MANUAL)
    print(f"archive sha256 {digest} (verified)", file=sys.stderr)
    try:
        _unpack_model_files(archive, out_dir)
    except (tarfile.TarError, OSError) as exc:
        raise DownloadError(f"{archive}: not a usable archive ({exc}). {MANUAL}") from None
    load_sense_voice_model(out_dir)  # refuse to install something sherpa-onnx would choke on
    archive.unlink(missing_ok=True)
    return {path.name: sha256_file(path) for path in sorted(out_dir.iterdir()) if path.is_file()}


def _unpack_model_files(archive: Path, out_dir: Path) -> None:
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            name = Path(member.name)
            if name.is_absolute() or ".." in name.parts:
                raise tarfile.TarError(f"unsafe member path {member.name!r}")
            if not member.isfile() or name.name not in KEEP:
                continue
            source = tar.extractfile(member)
            if source is None:
                continue
            with source, (out_dir / name.name).open("wb") as target:
                shutil.copyfileobj(source, target)
