"""What the images are built from, checked without Docker (docs/deployment.md, "Supply chain").

Every Python package an image installs comes from a hashed lock file (deployment/locks/, made by
`make locks` with uv), installed with `--require-hashes --no-deps --only-binary=:all:`; the few
installs that cannot be hashed here are listed below with the reason. Every base image is pinned
by digest with its tag; the console's build stage runs a maintained Node.js LTS. The locks agree
with the chosen versions in deployment/pins/ and with pyproject.toml's requirements. Each check
is also shown failing on a bad input.
"""

from __future__ import annotations

import datetime
import re
from pathlib import Path

import pytest

from tests.test_images import DOCKERFILE, DOCKERFILE_ORIN, PINS, ROOT, instructions, parse, read_pins, substitute

LOCKS = ROOT / "deployment" / "locks"
#: The lock each image (or build stage) installs from.
IMAGE_LOCKS = {"cpu": "cpu.txt", "gpu": "gpu-x86_64.txt", "orin": "orin-aarch64.txt", "wheel": "build.txt",
               "models-service": "cpu.txt"}
#: Installs that are pinned by version but not hashed, each for a reason that is documented in
#: docs/deployment.md ("Supply chain"): the index that serves them is not reachable where the
#: locks are made, so no hash could be recorded honestly.
UNHASHED = {
    "torch": "the models builder stage; PyTorch's CPU index (download.pytorch.org)",
    "tensorrt-cu12-libs": "the GPU image; NVIDIA's index (pypi.nvidia.com)",
}
#: Base images whose digest is not recorded yet, and the build argument that must supply it (the
#: empty default makes the reference invalid, so the build stops instead of using the moving tag).
DIGEST_PENDING = {"nvcr.io/nvidia/l4t-jetpack:r36.4.0": "L4T_JETPACK_DIGEST"}
#: Node.js LTS lines and the end of their support (nodejs.org/en/about/previous-releases).
NODE_LTS_END = {22: datetime.date(2027, 4, 30), 24: datetime.date(2028, 4, 30)}
#: Docker's image reference with a digest: name[:tag]@sha256:<64 hex> (distribution/reference).
PINNED_REFERENCE = re.compile(r"[a-z0-9]+(?:[._-][a-z0-9]+)*(?::\d+)?(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                              r":[\w][\w.-]{0,127}@sha256:[0-9a-f]{64}")


# --- the checks ----------------------------------------------------------------------------------

def digest_problems(text: str) -> list[str]:
    """Every FROM that is not an earlier stage names `image:tag@sha256:<digest>`."""
    global_args, stages = parse(text)
    problems = []
    known: set[str] = set()
    for stage in stages:
        image = substitute(stage.image, global_args)
        if stage.image not in known:
            if image is None:
                problems.append(f"FROM {stage.image}: its digest comes from a build argument without a value")
            elif not PINNED_REFERENCE.fullmatch(image):
                problems.append(f"FROM {image}: not pinned as image:tag@sha256:<digest>")
        if stage.name:
            known.add(stage.name)
    return problems


def lock_problems(text: str) -> tuple[dict[str, str], list[str]]:
    """{name: version} of a uv/pip-compile lock, and its requirements that are not `==` with hashes."""
    pins: dict[str, str] = {}
    problems = []
    for requirement in re.split(r"\n(?=\S)", "\n".join(line for line in text.splitlines()
                                                        if not line.lstrip().startswith("#"))):
        requirement = requirement.strip()
        if not requirement:
            continue
        head = requirement.split("\\", 1)[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!_-]*)", head)
        hashes = re.findall(r"--hash=sha256:([0-9a-f]{64})\b", requirement)
        if not match:
            problems.append(f"{head!r}: not an exact `name==version` requirement")
            continue
        if not hashes:
            problems.append(f"{head}: no --hash=sha256")
        pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins, problems


def install_problems(text: str) -> list[str]:
    """Every pip install is hashed (a lock or a hashed pins file, --require-hashes, --no-deps,
    wheels only), kitt-stt's own wheel (--no-deps), or one of UNHASHED by name and pins file."""
    problems = []
    for run in (ins.args for ins in instructions(text) if ins.keyword == "RUN"):
        for command in (part.strip() for part in run.split("&&")):
            if "pip install" not in command and "pip wheel" not in command:
                continue
            if "pip wheel" in command:
                if "--no-build-isolation" not in command or "--no-deps" not in command:
                    problems.append(f"`{command}`: a wheel build that fetches its backend unhashed")
                continue
            files = re.findall(r"-r\s+(\S+)", command)
            if files:
                if not all("/locks/" in f or f.endswith("orin-onnxruntime-gpu.txt") for f in files):
                    problems.append(f"`{command}`: installs from a file that is not a lock")
                for flag in ("--require-hashes", "--no-deps"):
                    if flag not in command:
                        problems.append(f"`{command}`: without {flag}")
                if "--index-url" not in command and "--only-binary=:all:" not in command:
                    problems.append(f"`{command}`: may build from source (no --only-binary=:all:)")
            elif re.search(r"--no-deps\s+/dist/kitt_stt-\*\.whl$", command):
                pass
            else:
                named = [name for name in UNHASHED if re.search(rf"\s{re.escape(name)}$", command)]
                if not named or "-c /" not in command or "--index-url" not in command:
                    problems.append(f"`{command}`: not hashed")
    return problems


# --- the real files ------------------------------------------------------------------------------

def test_base_images_are_pinned_by_digest() -> None:
    assert digest_problems(DOCKERFILE.read_text()) == []
    [pending] = digest_problems(DOCKERFILE_ORIN.read_text())
    assert pending.startswith("FROM nvcr.io/nvidia/l4t-jetpack:r36.4.0@${L4T_JETPACK_DIGEST}"), pending


def test_a_pending_digest_stops_the_build_until_it_is_given() -> None:
    """The Jetson base has no recorded digest: the empty default leaves `tag@`, which Docker refuses
    as an image reference; with the digest given, the reference is a valid pin."""
    global_args, stages = parse(DOCKERFILE_ORIN.read_text())
    [(tag, arg)] = DIGEST_PENDING.items()
    [stage] = [s for s in stages if s.image.startswith(tag)]
    assert stage.image == f"{tag}@${{{arg}}}"
    assert arg in global_args and not global_args[arg], "the digest ARG must be empty until it is known"
    assert not PINNED_REFERENCE.fullmatch(stage.image.replace(f"${{{arg}}}", ""))
    given = substitute(stage.image, {**global_args, arg: "sha256:" + "0" * 64})
    assert given is not None and PINNED_REFERENCE.fullmatch(given)


def test_the_console_is_built_on_a_maintained_node_lts() -> None:
    for dockerfile in (DOCKERFILE, DOCKERFILE_ORIN):
        _, stages = parse(dockerfile.read_text())
        [console] = [s for s in stages if s.name == "console"]
        match = re.fullmatch(r"node:(\d+)-[\w.-]+@sha256:[0-9a-f]{64}", console.image)
        assert match, console.image
        major = int(match.group(1))
        assert major in NODE_LTS_END, f"node {major} is not an LTS line"
        assert datetime.date.today() < NODE_LTS_END[major], f"node {major} reached its end of life"


@pytest.mark.parametrize("lock", sorted(LOCKS.glob("*.txt")), ids=lambda p: p.name)
def test_every_lock_is_exact_and_hashed(lock: Path) -> None:
    pins, problems = lock_problems(lock.read_text())
    assert problems == []
    assert pins
    assert "make locks" in lock.read_text().split("\n", 3)[1], "the header names the refresh command"


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, DOCKERFILE_ORIN], ids=lambda p: p.name)
def test_every_install_is_hashed_or_a_listed_exception(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    assert install_problems(text) == []
    used = set(re.findall(r"/locks/([\w.-]+\.txt)", text))
    _, stages = parse(text)
    for stage in stages:
        if stage.name in IMAGE_LOCKS and any("pip" in run for run in stage.all("RUN")):
            assert IMAGE_LOCKS[stage.name] in used, f"stage {stage.name} does not install its lock"
    assert used <= {path.name for path in LOCKS.glob("*.txt")}


def _requirement_names() -> set[str]:
    """pyproject.toml's [project] dependencies (read by hand: tomllib is not in Python 3.10)."""
    block = re.search(r"^dependencies = \[\n(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.MULTILINE | re.DOTALL)
    assert block, "pyproject.toml: no dependencies list"
    names = re.findall(r'^\s*"([A-Za-z0-9][A-Za-z0-9._-]*)', block.group(1), re.MULTILINE)
    return {name.lower().replace("_", "-") for name in names}


@pytest.mark.parametrize("lock_name,pins_names,gpu", [
    ("cpu.txt", ["cpu.txt"], None),
    ("gpu-x86_64.txt", ["cpu.txt", "gpu-x86_64.txt"], "onnxruntime-gpu"),
    ("orin-aarch64.txt", ["orin.txt"], "jetson"),
])
def test_locks_agree_with_the_pins_and_the_project(lock_name: str, pins_names: list[str], gpu: str | None) -> None:
    """A lock holds every requirement of pyproject.toml (so a new dependency without `make locks`
    fails here) at the versions deployment/pins/ chose, and the right onnxruntime."""
    locked, _ = lock_problems((LOCKS / lock_name).read_text())
    for pins_name in pins_names:
        pins, _ = read_pins((PINS / pins_name).read_text())
        for name, version in pins.items():
            if name in UNHASHED or (gpu and name == "onnxruntime"):
                continue
            assert locked.get(name) == version, f"{lock_name}: {name} {locked.get(name)}, pinned {version}"
    expected = _requirement_names() - ({"onnxruntime"} if gpu else set())
    assert expected <= set(locked), f"{lock_name} lacks {sorted(expected - set(locked))}: run `make locks`"
    if gpu is None:
        assert "onnxruntime" in locked and "onnxruntime-gpu" not in locked
    elif gpu == "onnxruntime-gpu":
        assert "onnxruntime-gpu" in locked and "onnxruntime" not in locked
    else:  # the Jetson build comes from NVIDIA's index, by hash (orin-onnxruntime-gpu.txt)
        assert "onnxruntime" not in locked and "onnxruntime-gpu" not in locked


#: The Python and machine each image lock is resolved for (utils/lock_images.sh); cpu.txt resolves
#: the same on aarch64 (the models builder stage on arm64 machines), which the script checks.
IMAGE_PLATFORMS = {"cpu.txt": ("3.11", "x86_64"), "gpu-x86_64.txt": ("3.11", "x86_64"),
                   "orin-aarch64.txt": ("3.10", "aarch64")}
#: What the end-of-turn text model (smollm2-turn) needs besides onnxruntime and numpy: gguf converts
#: it in the models builder stage (cpu.txt), tokenizers runs at install and at run time, on every image.
TEXT_MODEL_PACKAGES = ("gguf", "tokenizers")


def _project_table() -> dict:
    import tomllib  # 3.11+ (this module's tests are unmarked: they run on 3.11+ only)
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def version_problems(locked: dict[str, str], requirements: list[str], python: str, machine: str) -> list[str]:
    """Each requirement that applies on this Python and machine and is in the lock is locked at a
    version its specifier allows (a lower bound raised without `make locks` is named here)."""
    from packaging.requirements import Requirement

    environment = {"python_version": python, "python_full_version": f"{python}.0", "platform_machine": machine,
                   "sys_platform": "linux", "platform_system": "Linux", "implementation_name": "cpython", "extra": ""}
    problems = []
    for line in requirements:
        requirement = Requirement(line)
        name = requirement.name.lower().replace("_", "-")
        if (requirement.marker is not None and not requirement.marker.evaluate(environment)) or name not in locked:
            continue
        if not requirement.specifier.contains(locked[name], prereleases=True):
            problems.append(f"{name} {locked[name]}: pyproject.toml wants {requirement.specifier}")
    return problems


@pytest.mark.parametrize("lock_name", sorted(IMAGE_PLATFORMS))
def test_the_image_locks_are_within_pyprojects_ranges(lock_name: str) -> None:
    locked, _ = lock_problems((LOCKS / lock_name).read_text())
    assert version_problems(locked, _project_table()["dependencies"], *IMAGE_PLATFORMS[lock_name]) == []


@pytest.mark.parametrize("lock_name", sorted(IMAGE_PLATFORMS))
def test_every_image_carries_the_text_models_packages(lock_name: str) -> None:
    """Runtime dependencies, not an extra: the images convert and run smollm2-turn (Dockerfiles)."""
    runtime = {re.match(r"[A-Za-z0-9._-]+", line).group(0).lower() for line in _project_table()["dependencies"]}
    locked, _ = lock_problems((LOCKS / lock_name).read_text())
    for name in TEXT_MODEL_PACKAGES:
        assert name in runtime, f"pyproject.toml: {name} is not a runtime dependency"
        assert name in locked, f"{lock_name} lacks {name}: run `make locks`"


@pytest.mark.parametrize("lock_name", sorted(IMAGE_PLATFORMS))
def test_the_images_carry_no_dev_tools(lock_name: str) -> None:
    """The dev extra (test tools, and pocketsphinx for the turn studies' aligner) stays out of the
    images: none of its packages is in an image lock, even as another package's dependency."""
    dev = {re.match(r"[A-Za-z0-9._-]+", line).group(0).lower().replace("_", "-")
           for line in _project_table()["optional-dependencies"]["dev"]}
    locked, _ = lock_problems((LOCKS / lock_name).read_text())
    assert "pocketsphinx" in dev
    assert sorted(dev & set(locked)) == []


def test_the_locks_have_a_refresh_target() -> None:
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^locks:.*\n(\t.*\n)*\t.*utils/lock_images\.sh", makefile, re.MULTILINE)
    script = (ROOT / "utils" / "lock_images.sh").read_text()
    for output in IMAGE_LOCKS.values():
        assert output in script


# --- the same checks fail on bad input -----------------------------------------------------------

def test_checks_fail_on_unpinned_bases_and_unhashed_installs() -> None:
    bad = """\
ARG DIGEST=
FROM python:3.11-slim-bookworm AS one
FROM node@sha256:{h} AS two
FROM one
FROM example.com/x:1@${{DIGEST}}
RUN pip install -r /opt/locks/cpu.txt && pip install fastapi==0.110 \\
 && pip install --require-hashes --no-deps -r /opt/pins/cpu.txt && pip wheel /src
""".format(h="a" * 64)
    assert digest_problems(bad) == [
        "FROM python:3.11-slim-bookworm: not pinned as image:tag@sha256:<digest>",
        f"FROM node@sha256:{'a' * 64}: not pinned as image:tag@sha256:<digest>",
        "FROM example.com/x:1@${DIGEST}: its digest comes from a build argument without a value",
    ]
    problems = install_problems(bad)
    assert "`pip install -r /opt/locks/cpu.txt`: without --require-hashes" in problems
    assert "`pip install fastapi==0.110`: not hashed" in problems
    assert "`pip install --require-hashes --no-deps -r /opt/pins/cpu.txt`: installs from a file that is not a lock" \
        in problems
    assert "`pip wheel /src`: a wheel build that fetches its backend unhashed" in problems
    _, lock = lock_problems("fastapi==0.165.0\n    # via x\nuvicorn>=0.35 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    assert lock == ["fastapi==0.165.0: no --hash=sha256", "'uvicorn>=0.35': not an exact `name==version` requirement"]
    assert version_problems({"gguf": "0.16.0", "tokenizers": "0.23.3", "pocketsphinx": "5.0.3"},
                            ["gguf>=0.17.1", "tokenizers>=0.21",
                             "pocketsphinx==5.0.4; platform_machine == 'x86_64'"], "3.10", "aarch64") == [
        "gguf 0.16.0: pyproject.toml wants >=0.17.1"]
