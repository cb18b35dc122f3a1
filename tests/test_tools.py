"""The measurement tools themselves: workload harness self-check, memory probe."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from utils.performance.memory_probe import MemoryProbe, read_sample, start_time
from utils.performance.workload import nearest_rank

REPO = Path(__file__).resolve().parent.parent


def test_workload_self_check_against_a_real_server(server) -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "utils/performance/workload.py"), "--url", server.url, "--self-check"],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "self-check: ok" in result.stdout


def test_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert nearest_rank(values, 50) == 10 and nearest_rank(values, 95) == 19 and nearest_rank(values, 100) == 20
    assert nearest_rank([3.0, 1.0, 2.0], 50) == 2.0


def test_memory_probe_samples_labels_and_floor() -> None:
    probe = MemoryProbe(os.getpid(), interval_s=0.02).start()
    probe.mark("idle")
    time.sleep(0.15)
    probe.mark("load")
    time.sleep(0.1)
    probe.stop()
    phases = {sample.phase for sample in probe.samples}
    assert {"idle", "load"} <= phases
    assert all(sample.rss_kb and sample.rss_kb > 0 for sample in probe.samples)
    floor = probe.floor()
    assert floor is not None and floor > 0
    assert probe.floor(phase="shutdown") is None


def test_memory_probe_stops_when_the_process_is_gone_and_never_writes_zero() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.3)"])
    assert start_time(child.pid) is not None
    probe = MemoryProbe(child.pid, interval_s=0.02).start()
    child.wait()
    time.sleep(0.1)
    assert not probe._thread.is_alive()  # stopped by itself
    probe.stop()
    assert probe.samples and all(s.rss_kb is None or s.rss_kb > 0 for s in probe.samples)
    gone = read_sample(child.pid, "x")
    assert (gone.rss_kb, gone.pss_kb, gone.uss_kb) == (None, None, None)
