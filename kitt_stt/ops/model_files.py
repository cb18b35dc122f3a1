"""The configured models as they are on disk now, with sha256, without installing anything.

``resolve_model`` installs a missing registry model (a download, or a minute of conversion);
the doctor must not, on a build machine or in a running pod, so it looks where the model would
be and says "not installed" instead. A registry model's ``.complete`` marker holds the sha256
recorded at install, so a file changed since then is named too.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kitt_stt.config.schema import ModelsConfig
from kitt_stt.models.checksums import sha256_file
from kitt_stt.models.registry import COMPLETE_MARKER, REGISTRY, default_cache_dir, installed_revision


@dataclass(frozen=True)
class ModelFile:
    path: Path
    size: int
    sha256: str
    recorded_sha256: str | None = None  # from the install marker, for registry models

    @property
    def modified(self) -> bool:
        return self.recorded_sha256 is not None and self.recorded_sha256 != self.sha256


@dataclass(frozen=True)
class ModelLocation:
    setting: str  # "asr.model"
    spec: str  # as configured: a registry name or a directory
    directory: Path
    present: bool
    files: tuple[ModelFile, ...] = ()
    problem: str = ""  # why it is not usable as it is

    def sha256_of(self, path: Path) -> str | None:
        return next((item.sha256 for item in self.files if item.path == path), None)


def locate_model(spec: str, models: ModelsConfig, setting: str) -> ModelLocation:
    """Where ``spec`` is, or would be installed, and the sha256 of what is there."""
    if spec in REGISTRY:
        directory = (models.cache_dir or default_cache_dir()) / spec
        marker = directory / COMPLETE_MARKER
        if not marker.is_file():
            return ModelLocation(setting, spec, directory, False,
                                 problem="not installed (the server installs it on first start, which needs the "
                                         "network for most models; `kitt-stt models prepare` does it ahead)")
        revision, wanted = installed_revision(directory), REGISTRY[spec].revision
        if revision != wanted:
            return ModelLocation(setting, spec, directory, True,
                                 problem=f"an older build (revision {revision}; this kitt-stt builds revision "
                                         f"{wanted}): the server installs it again on start, as `kitt-stt models "
                                         "prepare` does")
        recorded = _read_marker(marker)
        files = tuple(_describe(directory / name, digest) for name, digest in recorded.items()
                      if (directory / name).is_file())
        missing = [name for name in recorded if not (directory / name).is_file()]
        changed = [item.path.name for item in files if item.modified]
        problem = "; ".join(filter(None, [f"missing: {', '.join(missing)}" if missing else "",
                                          f"sha256 differs from install: {', '.join(changed)}" if changed else ""]))
        return ModelLocation(setting, spec, directory, True, files, problem)
    directory = Path(spec).expanduser()
    if not directory.is_dir():
        return ModelLocation(setting, spec, directory, False, problem="directory does not exist")
    files = tuple(_describe(path) for path in sorted(directory.iterdir())
                  if path.is_file() and not path.name.startswith("."))
    return ModelLocation(setting, spec, directory, True, files)


def _read_marker(marker: Path) -> dict[str, str]:
    recorded = {}
    for line in marker.read_text().splitlines():
        digest, _, name = line.partition("  ")
        if name:
            recorded[name] = digest
    return recorded


def _describe(path: Path, recorded: str | None = None) -> ModelFile:
    return ModelFile(path, path.stat().st_size, sha256_file(path), recorded)
