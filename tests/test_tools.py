"""The measurement tools themselves: workload harness self-check, memory probe."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from utils.performance.memory_probe import MemoryProbe, read_sample, start_time
from utils.performance.toolkit.stats import nearest_rank

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.serial  # checks the harness's own pacing (p95 <= 5 ms): a second worker's load breaks it
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


# ----- flood_bench.py, soak.py --abuse and their toolkit: the pure parts (the runs need minutes) ---


def test_flood_bench_arguments_and_server_config() -> None:
    from utils.performance.flood_bench import parse_args, server_overrides
    from utils.performance.toolkit.server import parse_set

    args = parse_args([])
    assert (args.model, args.utterances, args.timeout_s, args.flood_seats, args.target_ratio) == (
        "whisper-base", 8, 30.0, 8, 2.0)
    args = parse_args(["--model", "tone", "--utterances", "3", "--set", "server.max_pending_decodes=4",
                       "--set", "server.segment_starts={per_s: 1, burst: 2}"])
    assert args.sets == [{"server": {"max_pending_decodes": 4}},
                         {"server": {"segment_starts": {"per_s": 1, "burst": 2}}}]
    overrides = server_overrides(args.model, args.turn_model, args.realtime_factor, args.burst_ms, args.sets)
    assert overrides["asr"] == {"model": "tone"} and overrides["turn"] == {"model": None}
    assert overrides["server"]["rate_limit"] == {"realtime_factor": 4.0, "burst_ms": 10_000}
    assert overrides["server"]["max_pending_decodes"] == 4 and overrides["server"]["segment_starts"]["burst"] == 2
    for bad in ("no-equals", "=3", "server..x=1"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_set(bad)


def test_flood_bench_victim_plan_and_final_matching() -> None:
    from tests.helpers import FRAME_BYTES
    from utils.performance.toolkit.flooder import loudest_frame
    from utils.performance.toolkit.victim import build_plan, utterance_of

    phrase = np.zeros(16 * 110, dtype=np.int16)  # 110 ms: 6 frames once padded
    phrase[16 * 60:16 * 80] = 8000
    plan = build_plan(phrase, utterances=3, gap_ms=100, lead_ms=40)
    assert all(len(frame) == FRAME_BYTES for frame in plan.frames)
    assert plan.starts == [2, 13, 24] and plan.last_voiced == [7, 18, 29] and len(plan.frames) == 35
    assert plan.starts_ms == [40, 260, 480]
    assert [utterance_of(ms, plan.starts_ms) for ms in (0, 40, 259, 260, 470, 480, 10_000)] == [0, 0, 0, 1, 1, 2, 2]
    assert loudest_frame(phrase) == phrase[16 * 60:16 * 80].astype("<i2").tobytes()


def test_flood_bench_phase_accounting_report_and_verdict() -> None:
    from utils.performance.flood_bench import phase_table, verdict
    from utils.performance.toolkit.victim import PhaseResult, UtteranceResult

    def phase(name: str, latencies_ms: list[float | None], timeout_s: float = 1.0) -> PhaseResult:
        utterances = [UtteranceResult(i, sent_at=10.0, received_at=None if ms is None else 10.0 + ms / 1000,
                                      server_latency_ms=None if ms is None else ms / 10, finals=ms is not None,
                                      text="go") for i, ms in enumerate(latencies_ms)]
        return PhaseResult(name, utterances, timeout_s)

    base = phase("unflooded", [100.0, 200.0, 300.0])
    flooded = phase("flooded", [150.0, 500.0, None, 1500.0])  # one never came, one came after the 1 s timeout
    assert (flooded.received, flooded.lost, flooded.late) == (2, 2, 1)
    assert flooded.latencies() == pytest.approx([150.0, 500.0])
    table = phase_table([base, flooded])
    assert "| unflooded | 3/3 | 200 / 300 / 300 | 20 / 30 / 30 | 0 (0) | - | 'go' x3 |" in table
    assert "| flooded | 2/4 | 150 / 500 / 500 |" in table and "| 2 (1) |" in table
    problems = verdict({"unflooded": base, "flooded": flooded}, target_ratio=1.5)
    assert problems == ["flooded: 2 victim finals lost", "final latency p95 flooded / unflooded 1.67 > 1.5"]
    assert verdict({"unflooded": base, "flooded": phase("flooded", [300.0, 310.0])}, 2.0) == []


def test_flood_messages_are_valid_frames_and_counts_round_trip() -> None:
    from kitt_stt.protocol.codec import decode_client_frame
    from utils.performance.toolkit.flooder import FloodCounts, flood_messages

    groups = flood_messages(3, bytes(640))
    assert len(groups) == 3
    decoded = [decode_client_frame(message) for message in groups[2]]
    assert [frame.type for frame in decoded] == ["vad", "audio", "vad", "finalize"]
    assert {frame.seat for frame in decoded} == {"flood2"}
    counts = FloodCounts(connections=2, groups=10, seconds=1.5)
    counts.received.update({"final": 3, "error": 2})
    counts.errors["overloaded"] += 2
    counts.ended["1013"] += 1
    assert FloodCounts.from_dict(json.loads(json.dumps(counts.as_dict()))) == counts


def test_metrics_parsing() -> None:
    from utils.performance.toolkit.prometheus import labelled, metric, parse_metrics, queue_depth

    text = ('# HELP kitt_live_sessions Open WebSocket sessions\n# TYPE kitt_live_sessions gauge\n'
            'kitt_live_sessions 2.0\nkitt_scheduler_queue_depth 7.0\nkitt_other_queue_depth{lane="a"} 1.0\n'
            'kitt_errors_total{code="overloaded"} 3.0\nkitt_errors_total{code="rate_limited"} 1.0\n'
            'kitt_errors_created{code="overloaded"} 1.7e+09\n')
    series = parse_metrics(text)
    assert metric(series, "kitt_live_sessions") == 2.0 and metric(series, "kitt_seats") is None
    assert labelled(series, "kitt_errors_total", "code") == {"overloaded": 3.0, "rate_limited": 1.0}
    assert queue_depth(series) == (8.0, ['kitt_other_queue_depth{lane="a"}', "kitt_scheduler_queue_depth"])
    assert queue_depth({"kitt_live_sessions": 0.0}) is None


def test_soak_arguments_and_idle_timeout_only_when_asked() -> None:
    from utils.performance.soak import parse_args, server_overrides

    args = parse_args(["--abuse", "--cycles", "10"])
    assert args.abuse and args.floor_after == 5 and args.idle_timeout_s is None and args.flood_s == 1.0
    assert parse_args([]).floor_after == 50 and parse_args(["--cycles", "1"]).floor_after == 1
    assert "server" not in server_overrides("tone", "", None)  # an older server without the key still starts
    assert server_overrides("tone", "turnsense", 2.0) == {
        "turn": {"model": "turnsense"}, "asr": {"model": "tone"}, "server": {"idle_timeout_s": 2.0}}


def test_soak_malformed_frames_are_what_they_claim() -> None:
    from kitt_stt.protocol.codec import decode_client_frame
    from kitt_stt.protocol.errors import ProtocolError
    from utils.performance.toolkit.malformed import fuzz_messages

    messages = fuzz_messages(random.Random(3))
    kinds = {what for what, _, _ in messages}
    assert {"random bytes", "text message", "pcm over max_frame_ms", "seat with a NUL", "duplicate seq"} <= kinds
    for what, message, code in messages:
        assert len(message) < 1 << 20, what  # bigger would be closed with 1009, ending the check's connection
        if isinstance(message, str) or code in (None, "bad_audio") or what == "duplicate seq":
            continue  # answered by the connection (text, audio checks, seq order), not by the decoder
        with pytest.raises(ProtocolError) as raised:
            decode_client_frame(message)
        assert raised.value.code.value == code and not raised.value.fatal, what


def test_soak_ledger_counts_lost_duplicate_and_orphan_finals() -> None:
    from utils.performance.soak import Ledger

    ledger = Ledger()
    ledger.account([
        {"type": "speech_start", "seat": "driver", "segment_id": 1},
        {"type": "speech_start", "seat": "driver", "segment_id": 2},
        {"type": "final", "seat": "driver", "segment_id": 1},
        {"type": "final", "seat": "driver", "segment_id": 1},
        {"type": "final", "seat": "passenger", "segment_id": 4},
        {"type": "commit", "seat": "driver"},
        {"type": "error", "code": "internal", "fatal": True},
    ], ("driver", "passenger"), "normal")
    assert (ledger.speech_starts, ledger.finals, ledger.lost_finals, ledger.duplicate_finals, ledger.orphan_finals,
            ledger.lost_commits) == (2, 3, 1, 1, 1, 1)
    assert ledger.errors == {"normal": {"internal": 1}}
    problems = ledger.problems({"live sessions": 0.0, "seats": 1.0, "buffered bytes": None}, idle_timeout_s=None)
    assert problems == ["seats = 1 after the soak", "buffered bytes = missing from /metrics after the soak",
                        "1 lost finals", "1 duplicate finals", "1 finals without speech_start", "1 lost commits",
                        "1 fatal error frames (normal: internal)"]
    clean = Ledger()
    clean.account([{"type": "error", "code": "idle_timeout", "fatal": True}], (), "silent")
    clean.silent["closed by the server (1008)"] += 1
    assert clean.problems({"live sessions": 0.0}, idle_timeout_s=2.0) == []
    clean.silent["left open by the server"] += 1
    assert clean.problems({"live sessions": 0.0}, idle_timeout_s=2.0) == [
        "1 silent connections not closed by the server within 7 s"]
