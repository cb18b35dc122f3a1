"""The air-gapped path without a GPU: staging (which wheels a host lacks, split and join with
checks) and, inside a network namespace with no network (``unshare -n``), the offline install
from a wheel folder into a private target followed by the CPU arm end to end, JSON lines and
table included.

The wheel folder is built here, offline, by repacking three packages this interpreter has
(msgpack, webrtcvad-wheels, platformdirs: the protocol, the VAD, the model cache - the server
cannot start without them) and the "host" is a Python that has everything else, so the run only
works if the install really put them where the server imports them from. Where ``unshare -n``
is not allowed (no root), the same run goes with pip's index pointed at a closed port.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.gpu_fixtures import filtered_host, repack
from utils.gpu import record, stage
from utils.gpu.stage import StageError

REPO = Path(__file__).resolve().parents[1]
LACKING = ("msgpack", "webrtcvad-wheels", "platformdirs")


def test_split_and_join_round_trip_with_checks(tmp_path: Path) -> None:
    folder = tmp_path / "wheels"
    (folder / "models").mkdir(parents=True)
    big = os.urandom(int(2.5 * stage.MIB))
    (folder / "big-1.0-py3-none-any.whl").write_bytes(big)
    (folder / "small-1.0-py3-none-any.whl").write_bytes(b"small")
    (folder / "models" / "carrier.whl").write_bytes(os.urandom(stage.MIB + 1))
    stage.write_sums(folder)
    assert stage.split(folder, 1) == ["big-1.0-py3-none-any.whl: 3 parts", "carrier.whl: 2 parts"]
    assert all(path.stat().st_size <= stage.MIB for path in folder.rglob("*") if path.is_file())
    assert not (folder / "big-1.0-py3-none-any.whl").exists()
    with pytest.raises(StageError, match=r"big-1.0-py3-none-any.whl is missing \(split: run `stage join`\)"):
        stage.verify(folder)
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    assert stage.join(folder)[-1] == "SHA256SUMS: 3 files verified"
    assert (folder / "big-1.0-py3-none-any.whl").read_bytes() == big
    assert not list(folder.rglob("*.part*")) and not list(folder.rglob("*.parts.json"))

    damaged = copy / "big-1.0-py3-none-any.whl.part001"
    data = damaged.read_bytes()
    damaged.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))  # always a change (random data may end in 0)
    with pytest.raises(StageError, match=r"part big-1.0-py3-none-any.whl.part001 is damaged"):
        stage.join(copy)
    assert not (copy / "big-1.0-py3-none-any.whl").exists()  # nothing half-joined is left as the wheel
    damaged.unlink()
    with pytest.raises(StageError, match=r"part big-1.0-py3-none-any.whl.part001 is missing"):
        stage.join(copy)
    (copy / "small-1.0-py3-none-any.whl").write_bytes(b"SMALL")
    shutil.rmtree(copy / "models")
    (copy / "big-1.0-py3-none-any.whl.parts.json").unlink()
    with pytest.raises(StageError, match=r"small-1\.0-py3-none-any\.whl: sha256 differs") as error:
        stage.join(copy)
    assert "models/carrier.whl is missing" in str(error.value)


def test_split_and_join_through_the_command_line(tmp_path: Path) -> None:
    (tmp_path / "w").mkdir()
    (tmp_path / "w" / "a.whl").write_bytes(os.urandom(3 * stage.MIB))
    stage.write_sums(tmp_path / "w")
    command = [sys.executable, "-m", "utils.gpu.stage"]
    run = subprocess.run([*command, "split", str(tmp_path / "w"), "--max-mib", "1"], capture_output=True, text=True,
                         cwd=REPO, timeout=60)
    assert run.returncode == 0 and "a.whl: 3 parts" in run.stdout
    run = subprocess.run([*command, "join", str(tmp_path / "w")], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 0 and "a.whl (3 parts)" in run.stdout
    (tmp_path / "w" / "a.whl").write_bytes(b"truncated")
    run = subprocess.run([*command, "join", str(tmp_path / "w")], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert run.returncode == 1 and "a.whl: sha256 differs from SHA256SUMS" in run.stderr


def item(name: str, version: str, requires: list[str] | None = None) -> dict:
    return {"metadata": {"name": name, "version": version, "requires_dist": requires or []}}


def test_download_keeps_only_what_the_host_lacks() -> None:
    """pip's resolution holds everything; the host's inventory decides what is fetched."""
    items = [item("fastapi", "0.165.0", ["starlette>=0.40", "pydantic>=2"]), item("starlette", "1.10.0", ["anyio"]),
             item("anyio", "4.0"), item("pydantic", "2.14.4", ["pydantic-core==2.50.5"]),
             item("pydantic-core", "2.50.5"), item("numpy", "2.3.5"), item("msgpack", "1.2.4"),
             item("onnxruntime-gpu", "1.31.1", ["numpy>=1.21", 'nvidia-cudnn-cu13; extra == "cudnn"',
                                                'coloredlogs; python_version < "3.0"']),
             item("nvidia-cudnn-cu13", "9.15")]
    host = {"numpy": "2.1.0", "msgpack": "1.0.0", "pydantic": "2.5.0", "onnxruntime": "1.30.0"}
    roots = ["fastapi>=0.110", "numpy>=1.24", "msgpack>=1.0", "onnxruntime>=1.18", "pydantic>=2.6", "onnxruntime-gpu"]
    names = [entry["metadata"]["name"] for entry in stage.needed(items, roots, host, "3.12")]
    # pydantic 2.5 is too old for kitt-stt (>=2.6): fetched, with its own requirement
    assert names == ["anyio", "fastapi", "onnxruntime-gpu", "pydantic", "pydantic-core", "starlette"]
    with_libs = stage.needed(items, [*roots[:-1], "onnxruntime-gpu[cudnn]"], host, "3.12")
    assert "nvidia-cudnn-cu13" in [entry["metadata"]["name"] for entry in with_libs]
    host_has_gpu = {**host, "onnxruntime-gpu": "1.31.1", "pydantic": "2.14.0"}
    names = [entry["metadata"]["name"] for entry in stage.needed(items, roots, host_has_gpu, "3.12")]
    assert names == ["anyio", "fastapi", "starlette"]
    assert not stage.host_has_cuda_libraries({"libraries": {"libcudart.so.13": "/x"}}, 13)
    # pip's markers follow the interpreter it runs in: a requirement that only the host's Python has is named
    older = [item("anyio", "4.0", ['exceptiongroup>=1.0.2; python_version < "3.11"'])]
    with pytest.raises(StageError, match=r"no exceptiongroup, which .* run stage download where python3\.10"):
        stage.needed(older, ["anyio"], {}, "3.10")
    assert [entry["metadata"]["name"] for entry in stage.needed(older, ["anyio"], {}, "3.12")] == ["anyio"]
    assert stage.pip_python(stage.current_python()) == sys.executable
    assert stage.pip_python("2.0") == sys.executable  # no python2.0 here: this one, with a warning


@pytest.fixture(scope="module")
def offline_kit(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("offline")
    wheels = root / "wheels"
    wheels.mkdir()
    for name in LACKING:
        repack(name, wheels)
    stage.write_sums(wheels)
    python, host_site = filtered_host(root, set(LACKING))
    return {"root": root, "wheels": wheels, "python": python, "host_site": host_site, "models": model_cache}


def listing(folder: Path) -> str:
    return hashlib.sha256("\n".join(sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))).encode()).hexdigest()


def no_network_prefix() -> list[str]:
    """``unshare -n`` with loopback up where allowed; else nothing (the caller closes pip's index)."""
    if shutil.which("unshare") and subprocess.run(["unshare", "-n", "true"], capture_output=True).returncode == 0:
        return ["unshare", "-n", "bash", "-c", 'ip link set lo up && exec "$@"', "offline"]
    return []


def test_offline_install_then_the_cpu_arm_end_to_end(offline_kit: dict[str, Path], tmp_path: Path) -> None:
    python, wheels, host_site = offline_kit["python"], offline_kit["wheels"], offline_kit["host_site"]
    lacks = subprocess.run([str(python), "-c", "import msgpack"], capture_output=True, text=True)
    assert lacks.returncode != 0  # the host really lacks what the wheel folder brings
    before = listing(host_site)
    out = tmp_path / "out"
    env = {key: value for key, value in os.environ.items() if key not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env |= {"PYTHON": str(python), "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "HTTPS_PROXY": "http://127.0.0.1:9"}
    command = [*no_network_prefix(), "bash", str(REPO / "utils" / "gpu" / "acceptance.sh"), "--offline",
               "--wheels", str(wheels), "--providers", "cpu", "--out", str(out),
               "--model", str(offline_kit["models"] / "tone"), "--turnsense", str(offline_kit["models"] / "turnsense"),
               "--seats", "2", "--lengths", "3", "--rounds", "2", "--warmup", "1"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "Python packages for kitt-stt: all installed or in the wheel folder" in result.stdout
    lines = record.read(out)
    steps = {line["step"]: line for line in lines if line["kind"] == "step"}
    assert steps["install"]["status"] == "passed" and "3 wheels into" in steps["install"]["detail"]
    assert steps["ab"]["status"] == "passed" and steps["placement"]["status"] == "skipped"
    target = out / "site"
    assert {p.name.split("-")[0] for p in target.glob("*.dist-info")} == {"msgpack", "webrtcvad_wheels", "platformdirs"}
    assert listing(host_site) == before  # the host's packages were not touched
    cells = [line for line in lines if line["kind"] == "cell"]
    assert len(cells) == 1 and cells[0]["provider"] == "cpu" and cells[0]["seats"] == 2
    assert cells[0]["connections"] == 2 and cells[0]["final_ms"]["n"] == 4 and cells[0]["missing"] == 0
    assert cells[0]["warmup_rounds"] == 1 and cells[0]["checks_failed"]["text"] == 0
    table = (out / "table.md").read_text()
    assert "| 2 | 3 s | 2 | " in table and "(n=4)" in table and "- 2 seats x 3 s: CPU p50" in table
    server_log = next((out / "work").glob("ab-cpu/server.yaml"))
    assert json.loads(server_log.read_text())["extends"].endswith("config-k8s.yaml")
