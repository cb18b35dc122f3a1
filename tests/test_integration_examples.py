"""examples/echo_agent.py runs as documented (docs/integrations.md) against a real server, with each framework."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "echo_agent.py"


@pytest.mark.parametrize(("framework", "module"), [("pipecat", "pipecat"), ("livekit", "livekit.agents")])
def test_echo_agent_prints_the_committed_turn(server, tmp_path: Path, framework: str, module: str) -> None:
    if framework == "pipecat" and sys.version_info < (3, 11):
        pytest.skip("pipecat-ai 1.14 needs Python >= 3.11, so the pipecat extra installs nothing on 3.10")
    if importlib.util.find_spec(module.split(".")[0]) is None:
        pytest.skip(f"the {framework} extra is not installed (pip install 'kitt-stt[{framework}]')")
    wav = tmp_path / "door.wav"
    subprocess.run([sys.executable, "-m", "kitt_stt", "synth", "打开车门", str(wav)], check=True, timeout=60)
    done = subprocess.run([sys.executable, str(EXAMPLE), str(wav), "--framework", framework, "--url", server.url],
                          capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [line for line in done.stdout.splitlines() if line.startswith("you said:")] == ["you said: 打开车门"]
