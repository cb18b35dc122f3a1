"""The A/B table, from whatever ``results.jsonl`` holds (a run cut off mid-way gives the rows it
finished, and says which steps did not run).

    python -m utils.gpu.summary OUT            # prints the table and writes OUT/table.md

Sections follow the team's acceptance reports: conclusion (CUDA and TensorRT against the CPU at
the A/B seats), run conditions, final latency p50/p95 per seat count and length for each provider,
server-side latency, placement, TensorRT build and load times, memory, agreement, steps.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from utils.gpu import record  # noqa: E402

PROVIDERS = ("cpu", "cuda", "tensorrt")


def table(header: list[str], rows: Iterable[list[str]]) -> list[str]:
    rows = list(rows)
    return ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(row) + " |" for row in rows)]


def ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def pair(stats: dict[str, Any] | None) -> str:
    if not stats or not stats.get("n"):
        return "-"
    return f"{ms(stats['p50'])} / {ms(stats['p95'])}"


def ratio(slow: dict[str, Any] | None, fast: dict[str, Any] | None) -> str:
    if not slow or not fast or not slow.get("p50") or not fast.get("p50"):
        return "-"
    return f"{slow['p50'] / fast['p50']:.2f}x"


def counted(cell: dict[str, Any], field: str) -> str:
    missing = f", {cell['missing']} missing" if cell["missing"] else ""
    return f"{pair(cell[field])} (n={cell[field]['n']}{missing})"


def cells_by_key(lines: list[dict[str, Any]]) -> dict[tuple[int, float], dict[str, dict[str, Any]]]:
    """(seats, length) -> provider -> the cell (a later step's cell for the same key wins)."""
    found: dict[tuple[int, float], dict[str, dict[str, Any]]] = {}
    for line in lines:
        if line["kind"] == "cell":
            found.setdefault((line["seats"], line["length_s"]), {})[line["provider"]] = line
    return dict(sorted(found.items()))


def conclusion(cells: dict[tuple[int, float], dict[str, dict[str, Any]]], seats: int) -> list[str]:
    out = []
    for (count, length), by in cells.items():
        if count != seats or "cpu" not in by:
            continue
        parts = [f"CPU p50 {ms(by['cpu']['final_ms']['p50'])} ms"]
        for provider in ("cuda", "tensorrt"):
            if provider in by:
                parts.append(f"{provider} {ms(by[provider]['final_ms']['p50'])} ms "
                             f"(CPU / {provider}: {ratio(by['cpu']['final_ms'], by[provider]['final_ms'])})")
        out.append(f"- {seats} seats x {length:g} s: " + "; ".join(parts))
    return out or ["- no A/B cell finished yet"]


def latency_section(cells: dict[tuple[int, float], dict[str, dict[str, Any]]], field: str) -> list[str]:
    rows = []
    for (seats, length), by in cells.items():
        first = next(iter(by.values()))
        row = [str(seats), f"{length:g} s", f"{first['connections']}"]
        row += [counted(by[p], field) if p in by else "-" for p in PROVIDERS]
        row += [ratio(by.get("cpu", {}).get(field), by.get("cuda", {}).get(field)),
                ratio(by.get("cuda", {}).get(field), by.get("tensorrt", {}).get(field))]
        rows.append(row)
    return table(["seats", "length", "connections", "cpu p50 / p95 ms", "cuda p50 / p95 ms", "tensorrt p50 / p95 ms",
                  "cpu / cuda (p50)", "cuda / tensorrt (p50)"], rows)


def arms_note(cells: dict[tuple[int, float], dict[str, dict[str, Any]]], run: dict[str, Any]) -> str:
    side_by_side = run.get("parallel") and any(len(by) > 1 and "cpu" in by for by in cells.values())
    return "CPU and CUDA side by side on disjoint CPU cores" if side_by_side else "one provider at a time"


def build(lines: list[dict[str, Any]]) -> str:
    run = next((line for line in lines if line["kind"] == "run"), {})
    cells = cells_by_key(lines)
    model = next((line for line in lines if line["kind"] == "model"), {})
    preflight = next((line for line in lines if line["kind"] == "preflight"), {})
    out = ["# kitt-stt acceptance: CPU / CUDA / TensorRT A/B", "", "## 1 · Conclusion", ""]
    out += conclusion(cells, run.get("seats", 4))
    host = run.get("host", {})
    facts = preflight.get("facts", {})
    out += ["", "## 2 · Conditions", "",
            f"- host: Python {host.get('python', '?')}, {host.get('machine', '?')}, {host.get('cpus', '?')} CPUs; "
            f"GPU: {'; '.join(host.get('gpus', [])) or 'none'}",
            *(f"- {name}: {value}" for name, value in facts.items()),
            f"- model: {model.get('name', '?')} ({model.get('model_onnx_mb', '?')} MB model.onnx); TurnSense on",
            "- settings: config-k8s.yaml (asr.max_batch 8, asr.workers 4, TurnSense, VAD and chunking of "
            "config.yaml); only model, provider, caches, loopback and seats per connection changed",
            f"- workload: {run.get('rounds', '?')} rounds per cell after {run.get('warmup', '?')} warm-up round(s) "
            "(not counted); seats split over several connections; real-time 20 ms frames; latency = client "
            "`vad stop` -> last final",
            f"- arms: {arms_note(cells, run)}", "", "## 3 · Final latency (client), p50 / p95 ms", ""]
    out += latency_section(cells, "final_ms") if cells else ["no cells"]
    out += ["", "### 3.1 Server latency (the final's server_latency_ms), p50 / p95 ms", ""]
    out += latency_section(cells, "server_ms") if cells else ["no cells"]
    placements = [line for line in lines if line["kind"] == "placement"]
    out += ["", "## 4 · Placement", ""]
    out += table(["provider", "mode", "session providers", "profile: nodes and kernel time", "problem"],
                 [[p["provider"], p["mode"], ", ".join(p["providers"]), p["placement"], p["problem"] or "none"]
                  for p in placements]) if placements else ["not measured (no GPU step ran)"]
    trt = [line for line in lines if line["kind"] == "trt"]
    out += ["", "## 5 · TensorRT build and load", ""]
    out += table(["stage", "seconds", "note"],
                 [[t["stage"], f"{t['seconds']:.1f}", "" if "engines_reused" not in t else
                   ("engine reused" if t["engines_reused"] else "engine rebuilt")] for t in trt]) if trt else \
        [f"not measured ({facts.get('TensorRT', 'no trt-build step ran')})"]
    out += ["", "## 6 · Memory (server process, MiB)", ""]
    memory_rows = []
    for (seats, length), by in cells.items():
        for provider, cell in by.items():
            end, ready = cell.get("memory", {}), cell.get("memory_ready", {})
            memory_rows.append([provider, str(seats), f"{length:g} s", ms(ready.get("vmrss_mib")),
                                ms(end.get("vmhwm_mib")), ms(end.get("gpu_mib"))])
    out += table(["provider", "seats", "length", "RSS at ready", "peak RSS", "GPU (nvidia-smi)"], memory_rows) \
        if memory_rows else ["no cells"]
    agreement = [line for line in lines if line["kind"] == "agreement"]
    out += ["", "## 7 · Agreement with the CPU (same audio, same engine)", ""]
    out += table(["provider", "model", "clips", "token sequences equal", "CER", "tolerance", "verdict"],
                 [[a["provider"], a["model"], str(a["clips"]), f"{a['exact']} ({a['exact_rate']:.0%})",
                   f"{a['cer']:.2%}",
                   f">= {a['tolerance']['exact_rate']:.0%} equal, CER <= {a['tolerance']['cer']:.0%}",
                   "within" if a["within_tolerance"] else "OUTSIDE"] for a in agreement]) if agreement else \
        ["not measured (only the CPU ran, or the step did not run)"]
    steps = [line for line in lines if line["kind"] == "step"]
    out += ["", "## 8 · Steps", ""]
    out += table(["#", "step", "status", "seconds", "limit", "detail"],
                 [[str(s["number"]), s["step"], s["status"], f"{s['seconds']:.0f}", f"{s['limit_s']:.0f}",
                   s["detail"].replace("\n", " ")[:160]] for s in steps])
    ran = {s["step"] for s in steps}
    if run and "agreement" not in ran:
        out += ["", "The run ended before its last step: the rows above are what it finished."]
    return "\n".join(out) + "\n"


def write_table(out: Path) -> str:
    text = build(record.read(out))
    (out / "table.md").write_text(text)
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="the run's --out folder (or its results.jsonl)")
    args = parser.parse_args(argv)
    folder = args.out if args.out.is_dir() else args.out.parent
    print(write_table(folder), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
