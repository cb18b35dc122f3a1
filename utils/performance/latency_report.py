"""Final latency vs speech length: optimised (pause-chunked, prioritised) vs naive, one run.

Starts two real servers on the same model with the shipped VAD and chunking defaults, one as
shipped and one with ``asr.naive`` (whole-segment re-decodes, one FIFO queue: the old service's
behaviour), and drives both with the workload harness for each seat count, utterance length,
end of speech and pause length, alternating between them:

* ``--vad server``: the client sends audio only (as most clients do) and ``--tail-ms`` of
  silence after the speech; latency is from the end of the speech to its last final, so it
  includes the server's VAD endpoint (``vad.silence_ms``). ``--vad client``: the client sends
  ``vad stop`` when the speech ends; latency is from that frame to the final.
* ``--pauses``: utterances repeat a phrase with pauses of this many ms between repetitions;
  ``0`` is continuous speech (only the phrase's own 90 ms gaps, too short to close a chunk).

Reports final latency p50/p95 (nearest rank), CPU seconds the server spent per second of audio,
and the highest seat count whose final p95 stays under 500 ms. A round that does not finish
within length + 30 s counts its missing finals as failures.

    python utils/performance/latency_report.py --model sensevoice-bench --seats 4 --lengths 3 15 30 \
        --vad server client --pauses 450 0
    python utils/performance/latency_report.py --model whisper-base \
        --wav tests/fixtures/speech/en_open_the_car_door_please.wav --naive-max-segment-ms 29000

With ``--wav`` the phrase is real speech (its leading and trailing silence trimmed), and the
1-seat rows also compare the texts: pause-chunked (optimised) against whole-segment (naive).
Whisper reads at most 30 s per decode, so its naive server must split longer speech
(``--naive-max-segment-ms``); such rows count as incomplete (two finals).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))


from kitt_stt.audio.wavfile import read_wav_16k_mono, write_wav_16k_mono  # noqa: E402
from kitt_stt.models.tone_synth import ToneStyle, synthesize  # noqa: E402
from tests.helpers import run_server  # noqa: E402
from utils.performance.speech import trim_silence  # noqa: E402
from utils.performance.text_distance import edit_distance, words  # noqa: E402
from utils.performance.toolkit.stats import nearest_rank  # noqa: E402
from utils.performance.workload import run_plan, split_seats  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")
#: server.max_seats of both servers: a larger --seats is spread over several connections.
MAX_SEATS = 16


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime + stime


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="sensevoice-bench", help="asr.model for both servers")
    parser.add_argument("--seats", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--lengths", type=float, nargs="+", default=[3, 15, 30])
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--wav", type=Path, help="a real phrase (16 kHz mono WAV) instead of tone speech")
    parser.add_argument("--naive-max-segment-ms", type=int, default=90_000)
    parser.add_argument("--vad", nargs="+", choices=["server", "client"], default=["server", "client"],
                        help="who ends the speech: the server's VAD (client sends audio only) or `vad stop`")
    parser.add_argument("--pauses", type=int, nargs="+", default=[450], help="ms between phrase repetitions")
    parser.add_argument("--tail-ms", type=int, default=2000, help="silence after the speech (--vad server)")
    parser.add_argument("--modes", nargs="+", choices=["optimised", "naive", "0.1-defaults"],
                        default=["optimised", "naive"],
                        help="0.1-defaults: the shipped code with release 0.1's endpointing and chunking settings "
                             "(vad.silence_ms 500, asr.chunk_pause_ms 200, asr.max_chunk_ms 10000)")
    args = parser.parse_args()
    from kitt_stt.config.schema import AppConfig
    from kitt_stt.models.registry import default_cache_dir

    shipped = AppConfig()
    results = []
    texts: dict[tuple[str, float], str] = {}
    with tempfile.TemporaryDirectory(prefix="latency-report-") as tmp:
        work = Path(tmp)
        phrase = work / "phrase.wav"
        if args.wav:
            spoken = trim_silence(read_wav_16k_mono(args.wav))
        else:
            spoken = (synthesize("打开车门关窗", ToneStyle(burst_ms=220, gap_ms=90)) * 32767).astype("<i2")
        write_wav_16k_mono(phrase, spoken)
        common = {"asr": {"model": args.model, "chunk_pause_ms": shipped.asr.chunk_pause_ms,
                          "max_chunk_ms": shipped.asr.max_chunk_ms},
                  "vad": {**shipped.vad.model_dump(mode="json"), "max_segment_ms": 90_000},
                  "turn": {"model": None, "wait_ms": 300}, "server": {"max_seats": MAX_SEATS}}
        naive = {**common, "asr": {**common["asr"], "naive": True},
                 "vad": {**common["vad"], "max_segment_ms": args.naive_max_segment_ms}}
        old_defaults = {**common, "asr": {**common["asr"], "chunk_pause_ms": 200, "max_chunk_ms": 10_000},
                        "vad": {**common["vad"], "silence_ms": 500}}
        configs = {"optimised": common, "naive": naive, "0.1-defaults": old_defaults}
        cache = default_cache_dir()
        with contextlib.ExitStack() as stack:
            servers = {mode: stack.enter_context(run_server(work, cache, configs[mode])) for mode in args.modes}
            for seats in args.seats:
                for length in args.lengths:
                    for vad in args.vad:
                        for pause in args.pauses:
                            for mode in args.modes:
                                server = servers[mode]
                                print(f"  {mode}: {seats} seats x {length:g} s, {vad} VAD, pauses {pause} ms ...",
                                      file=sys.stderr, flush=True)
                                before = cpu_seconds(server.process.pid)
                                rows = asyncio.run(run_plan(
                                    server.url, split_seats(seats, MAX_SEATS), [length], args.rounds, 0, None,
                                    phrase, pause,
                                    progress=False, server_vad_tail_ms=args.tail_ms if vad == "server" else None))
                                cpu = cpu_seconds(server.process.pid) - before
                                latencies = [r.client_final_latency_ms for r in rows
                                             if r.client_final_latency_ms is not None]
                                missing = sum(1 for r in rows if r.client_final_latency_ms is None
                                              or not r.checks["one_final_per_segment"] or not r.checks["text"])
                                if seats == 1 and vad == "client" and pause == args.pauses[0]:
                                    texts[mode, length] = " / ".join(r.text for r in rows)
                                results.append({"mode": mode, "seats": seats, "length": length, "vad": vad,
                                                "pause": pause, "p50": nearest_rank(latencies, 50),
                                                "p95": nearest_rank(latencies, 95), "missing": missing,
                                                "rows": len(rows),
                                                "cpu_per_audio_s": cpu / (seats * length * args.rounds)})
    print("| seats | audio | end of speech | pauses | mode | final p50 (ms) | final p95 (ms) | incomplete rows | "
          "CPU s per audio s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in results:
        p50 = "-" if row["p50"] is None else f"{row['p50']:.0f}"
        p95 = "-" if row["p95"] is None or row["missing"] else f"{row['p95']:.0f}"
        ending = "server VAD" if row["vad"] == "server" else "vad stop"
        pauses = f"{row['pause']} ms" if row["pause"] else "none"
        print(f"| {row['seats']} | {row['length']:g} s | {ending} | {pauses} | {row['mode']} | {p50} | {p95} | "
              f"{row['missing']}/{row['rows']} | {row['cpu_per_audio_s']:.3f} |")
    print()
    for length in args.lengths:
        for vad in args.vad:
            for pause in args.pauses:
                cell = [r for r in results if r["length"] == length and r["vad"] == vad and r["pause"] == pause]
                for mode in args.modes:
                    ok = [r["seats"] for r in cell if r["mode"] == mode and not r["missing"]
                          and r["p95"] is not None and r["p95"] < 500]
                    print(f"{length:g} s, {vad} VAD, pauses {pause} ms, {mode}: highest seat count with final "
                          f"p95 < 500 ms: {max(ok) if ok else 'none'}")
                by_mode = {r["mode"]: r for r in cell if r["seats"] == 4}
                for other in ("naive", "0.1-defaults"):
                    if by_mode.get(other, {}).get("p50") and by_mode.get("optimised", {}).get("p50"):
                        print(f"{length:g} s, {vad} VAD, pauses {pause} ms, 4 seats: {other} / optimised median "
                              f"final latency = {by_mode[other]['p50'] / by_mode['optimised']['p50']:.1f}x")
    if args.wav and texts:
        print("\n1 seat, final text: pause-chunked (optimised) vs whole-segment (naive)")
        for length in args.lengths:
            chunked, whole = texts.get(("optimised", length), ""), texts.get(("naive", length), "")
            distance = edit_distance(words(chunked), words(whole))
            print(f"{length:g} s: {distance} word edits over {len(words(whole))} words\n"
                  f"  chunked: {chunked}\n  whole:   {whole}")
    return 0



if __name__ == "__main__":
    sys.exit(main())
