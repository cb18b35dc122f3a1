"""Which requirements a set of installed distributions does not satisfy.

Used before anything is installed (preflight), after the offline install (did the wheel folder
bring everything?) and when staging (what does the host lack?). ``packaging`` evaluates the
specifiers and markers; a bare host may not have it installed, but pip always vendors a copy, so
that one is used then.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from utils.gpu.wheels import canonical

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
except ImportError:  # pragma: no cover - hosts without packaging still have pip's copy
    from pip._vendor.packaging.markers import default_environment  # type: ignore[no-redef]
    from pip._vendor.packaging.requirements import Requirement  # type: ignore[no-redef]

__all__ = ["Requirement", "applies", "project_requirements", "unsatisfied"]


def project_requirements(repo: Path) -> list[str]:
    """pyproject.toml's ``[project] dependencies`` (read without tomllib, which 3.10 lacks)."""
    text = (repo / "pyproject.toml").read_text()
    block = re.search(r"^dependencies\s*=\s*\[(.*?)^\]", text, re.MULTILINE | re.DOTALL)
    if block is None:
        raise ValueError(f"{repo / 'pyproject.toml'}: no [project] dependencies list")
    return re.findall(r'^\s*"([^"]+)"', block.group(1), re.MULTILINE)


def applies(requirement: Requirement, environment: dict[str, str] | None = None, extras: Iterable[str] = ()) -> bool:
    """Whether the requirement's marker holds here (or in ``environment``) for the given extras."""
    if requirement.marker is None:
        return True
    base: dict[str, Any] = dict(environment or default_environment())
    return any(requirement.marker.evaluate({**base, "extra": extra}) for extra in (*extras, ""))


def unsatisfied(requirements: Iterable[str], versions: dict[str, str],
                environment: dict[str, str] | None = None) -> list[str]:
    """Each requirement (that applies) which ``versions`` (canonical name -> version) does not meet,
    as "name>=x (not installed)" or "name>=x (has 1.0)"."""
    problems = []
    for text in requirements:
        requirement = Requirement(text)
        if not applies(requirement, environment):
            continue
        have = versions.get(canonical(requirement.name))
        if have is None:
            problems.append(f"{requirement} (not installed)")
        elif requirement.specifier and not requirement.specifier.contains(have, prereleases=True):
            problems.append(f"{requirement} (has {have})")
    return problems


def python_environment(python_version: str) -> dict[str, str]:
    """Marker values for another Python on Linux x86-64 (staging for a host that is not this one)."""
    environment = dict(default_environment())
    environment.update({"python_version": python_version, "python_full_version": f"{python_version}.0",
                        "implementation_version": f"{python_version}.0", "sys_platform": "linux",
                        "platform_system": "Linux", "os_name": "posix"})
    return environment


def current_python() -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}"
