"""Two processes installing one model into one shared cache (two replicas starting on a shared
volume): the install lock makes the second wait and then find the first's install complete."""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from kitt_stt.config.schema import ModelsConfig
from kitt_stt.models import registry
from kitt_stt.models.registry import resolve_model, verify_installed


def _install_tone(cache: Path, installs: Path, barrier: Any) -> None:
    """One replica: start together with the other, install (slowly) if missing, check what it got."""
    entry = registry.REGISTRY["tone"]

    def slow_install(out: Path, models: ModelsConfig) -> dict[str, str]:
        with installs.open("a") as log:
            log.write(f"{os.getpid()}\n")
        time.sleep(1.0)  # long enough that the other replica arrives while this one is installing
        return entry.install(out, models)

    registry.REGISTRY["tone"] = dataclasses.replace(entry, install=slow_install)
    barrier.wait(timeout=60)
    directory = resolve_model("tone", ModelsConfig(cache_dir=cache)).directory
    problems = verify_installed(directory)
    assert problems == [], problems


def test_two_processes_installing_one_model_install_it_once(tmp_path: Path) -> None:
    cache, installs = tmp_path / "cache", tmp_path / "installs.log"
    context = multiprocessing.get_context("spawn")  # a fresh interpreter, as a second replica would be
    barrier = context.Barrier(2)
    replicas = [context.Process(target=_install_tone, args=(cache, installs, barrier)) for _ in range(2)]
    for replica in replicas:
        replica.start()
    for replica in replicas:
        replica.join(120)
    assert [replica.exitcode for replica in replicas] == [0, 0]
    assert len(installs.read_text().splitlines()) == 1  # the second found the first's install and did nothing
    assert verify_installed(cache / "tone") == []
    assert sorted(path.name for path in cache.iterdir()) == ["tone", "tone.lock"]  # no staging directory left


def test_a_build_from_an_older_revision_is_installed_again(tmp_path: Path, monkeypatch: Any) -> None:
    """A generated model whose builder changed (the tone model's words, issue 25) must not be served
    from a cache that holds the old build: it would decode, but not as the code expects."""
    builds: list[int] = []
    entry = registry.REGISTRY["tone"]

    def counting_install(out: Path, models: ModelsConfig) -> dict[str, str]:
        builds.append(1)
        return entry.install(out, models)

    monkeypatch.setitem(registry.REGISTRY, "tone", dataclasses.replace(entry, install=counting_install))
    directory = resolve_model("tone", ModelsConfig(cache_dir=tmp_path)).directory
    assert registry.installed_revision(directory) == entry.revision >= 2 and len(builds) == 1
    resolve_model("tone", ModelsConfig(cache_dir=tmp_path))
    assert len(builds) == 1  # current: kept
    (directory / registry.REVISION_MARKER).unlink()  # what a cache from before revisions holds: revision 1
    resolve_model("tone", ModelsConfig(cache_dir=tmp_path))
    assert len(builds) == 2 and registry.installed_revision(directory) == entry.revision
    assert verify_installed(directory) == []


def test_models_list_names_an_outdated_build(tmp_path: Path) -> None:
    """``models list`` tells an older build (rebuilt on the next start) from a current install."""
    directory = resolve_model("tone", ModelsConfig(cache_dir=tmp_path)).directory
    config = tmp_path / "config.yaml"
    config.write_text(f"models:\n  cache_dir: {tmp_path}\n")

    def tone_state() -> str:
        out = subprocess.run([sys.executable, "-m", "kitt_stt", "models", "list", "--config", str(config)],
                             capture_output=True, text=True, check=True).stdout
        return next(line.split()[2] for line in out.splitlines() if line.startswith("tone "))

    assert tone_state() == "installed"
    (directory / registry.REVISION_MARKER).write_text("1\n")
    assert tone_state() == "outdated"
