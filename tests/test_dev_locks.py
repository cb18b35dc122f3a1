"""The development environment's locks (docs/testing.md, "The locks"): what `make serve` and `make test`
install is exactly what deployment/locks/ records, so a fresh machine tests the same files.

Checked without the registry: each lock is exact and hashed, covers every requirement of
pyproject.toml that its install needs (a dependency added without `make locks` is named here, not
found by a fresh machine's ImportError), agrees with the other locks where they share a package, and
names the instant it was resolved as of, which is the one utils/lock_dev.sh sets.
"""

from __future__ import annotations

import re

import pytest
from packaging.requirements import Requirement

from tests.test_supply_chain import LOCKS, ROOT, lock_problems
from utils.lock_drift import drift, pins

SCRIPT = ROOT / "utils" / "lock_dev.sh"
#: Python each lock is compiled for (its name says it, and the Makefile checks it before installing).
LOCK_PYTHON = {"dev-py311.txt": "3.11", "dev-py310.txt": "3.10", "serve-py311.txt": "3.11"}


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def script_extras() -> dict[str, list[str]]:
    """{lock file: the extras utils/lock_dev.sh compiles it with}, read from the script itself."""
    text = SCRIPT.read_text().replace("\\\n", " ")
    return {match.group(1): re.findall(r"--extra (\S+)", match.group(2))
            for match in re.finditer(r"^compile (\S+) \S+ (.*)$", text, re.MULTILINE)}


def needed(extras: list[str], python: str) -> set[str]:
    """The names pyproject.toml asks for with these extras on Linux x86-64 and this Python."""
    import tomllib  # 3.11+: imported here, so collecting this module on 3.10 (`make test-py310`) works
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    groups = [("", project["dependencies"])] + [(extra, project["optional-dependencies"][extra]) for extra in extras]
    environment = {"python_version": python, "python_full_version": f"{python}.0", "platform_machine": "x86_64",
                   "sys_platform": "linux", "platform_system": "Linux", "implementation_name": "cpython"}
    names = set()
    for extra, requirements in groups:
        for line in requirements:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({**environment, "extra": extra}):
                names.add(normalise(requirement.name))
    return names


def missing(lock_text: str, extras: list[str], python: str) -> list[str]:
    locked, _ = lock_problems(lock_text)
    return sorted(needed(extras, python) - set(locked))


def test_the_script_makes_the_locks_the_makefile_installs() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert set(script_extras()) == set(LOCK_PYTHON)
    for lock in LOCK_PYTHON:
        assert f"$(LOCKS)/{lock}" in makefile, lock
    assert "--require-hashes --no-deps --no-build-isolation -r $(2)" in makefile


@pytest.mark.parametrize("lock", sorted(LOCK_PYTHON))
def test_each_lock_is_exact_hashed_and_covers_its_install(lock: str) -> None:
    text = (LOCKS / lock).read_text()
    _, problems = lock_problems(text)
    assert problems == []
    assert missing(text, script_extras()[lock], LOCK_PYTHON[lock]) == []


def test_a_dependency_added_without_make_locks_is_named() -> None:
    text = (LOCKS / "serve-py311.txt").read_text()
    without_fastapi = re.sub(r"(?ms)^fastapi==.*?(?=^\S)", "", text)
    assert missing(without_fastapi, script_extras()["serve-py311.txt"], "3.11") == ["fastapi"]
    assert "pytest" in missing(text, ["dev"], "3.11")  # the serve lock does not hold the test tools


def test_serving_and_testing_get_the_same_versions() -> None:
    serve, _ = lock_problems((LOCKS / "serve-py311.txt").read_text())
    dev, _ = lock_problems((LOCKS / "dev-py311.txt").read_text())
    assert set(serve) < set(dev)
    assert {name: (version, dev[name]) for name, version in serve.items() if dev[name] != version} == {}
    assert serve["torch"] == "2.13.0+cpu"  # the CPU build, not PyPI's CUDA one


def test_each_lock_names_the_instant_it_was_resolved_as_of() -> None:
    [instant] = re.findall(r"^RESOLVED_AS_OF=(\S+)$", SCRIPT.read_text(), re.MULTILINE)
    for lock in LOCK_PYTHON:
        assert f"# resolved as of {instant}" in (LOCKS / lock).read_text().splitlines()[1], lock


def test_drift_lists_what_today_resolves_differently() -> None:
    locked = pins("fastapi==0.165.0 \\\n    --hash=sha256:00\nWebSockets==17.4 \\\n    --hash=sha256:11\n")
    latest = pins("fastapi==0.166.0\nwebsockets==17.4\nnew_thing==1.0\n")
    assert drift(locked, latest) == ["fastapi 0.165.0 -> 0.166.0", "new-thing (new) -> 1.0"]
    assert drift(locked, locked) == []
