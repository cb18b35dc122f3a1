"""Which execution provider ran each node, read from an onnxruntime profile.

``session.get_providers()`` lists the providers a session may use, not the ones its nodes were
placed on: a CUDA session can still run its matrix products on the CPU when a kernel is missing.
A profile (``SessionOptions.enable_profiling``) records every node execution with its
``provider``; this module counts them (and separately the encoder's, by node name: where
SenseVoice computes) and checks that the wanted provider did the work. TensorRT fuses the graph into
``TRTKernel_*`` nodes, so there the encoder shows as TensorRT kernel time, not by name.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Operators that carry a model's compute; one of these on the CPU means the GPU is not doing the work.
HEAVY_OPS = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "FusedMatMul", "MatMulInteger",
                       "DynamicQuantizeMatMul", "QLinearMatMul", "Attention", "MultiHeadAttention", "Einsum",
                       "LSTM", "GRU"})
CPU = "CPUExecutionProvider"
#: How encoder nodes are named: SenseVoice's export (``/encoder/encoders.0/...``) and the
#: sensevoice-bench model's (``/layers.31/attention/...``).
ENCODER_MARKERS = ("encoder", "/layers.")


@dataclass(frozen=True)
class Placement:
    nodes: dict[str, int] = field(default_factory=dict)  # provider -> node executions
    microseconds: dict[str, int] = field(default_factory=dict)  # provider -> kernel time
    cpu_ops: dict[str, int] = field(default_factory=dict)  # op type -> executions on the CPU
    encoder: dict[str, int] = field(default_factory=dict)  # provider -> executions of encoder nodes

    def share(self, provider: str) -> float:
        total = sum(self.microseconds.values())
        return self.microseconds.get(provider, 0) / total if total else 0.0

    def describe(self) -> str:
        text = ", ".join(f"{provider.replace('ExecutionProvider', '')} {count} nodes {100 * self.share(provider):.0f} %"
                         for provider, count in sorted(self.nodes.items(), key=lambda item: -item[1]))
        if self.encoder:
            text += "; encoder nodes: " + ", ".join(f"{provider.replace('ExecutionProvider', '')} {count}"
                                                     for provider, count in sorted(self.encoder.items()))
        return text


def summarize(events: list[dict[str, Any]]) -> Placement:
    """Count ``Node`` events (one ``*_kernel_time`` per node execution) by provider."""
    nodes: Counter[str] = Counter()
    time: Counter[str] = Counter()
    cpu_ops: Counter[str] = Counter()
    encoder: Counter[str] = Counter()
    for event in events:
        args = event.get("args") or {}
        if event.get("cat") != "Node" or not str(event.get("name", "")).endswith("_kernel_time"):
            continue
        provider = str(args.get("provider", ""))
        if not provider:
            continue
        nodes[provider] += 1
        time[provider] += int(event.get("dur", 0))
        if provider == CPU:
            cpu_ops[str(args.get("op_name", "?"))] += 1
        if any(marker in str(event.get("name", "")).lower() for marker in ENCODER_MARKERS):
            encoder[provider] += 1
    return Placement(dict(nodes), dict(time), dict(cpu_ops), dict(encoder))


def load_profile(path: Path) -> Placement:
    return summarize(json.loads(path.read_text()))


def placement_problem(placement: Placement, wanted: str) -> str:
    """"" when ``wanted`` ran nodes and no heavy operator ran on the CPU; otherwise why not."""
    if not placement.nodes:
        return "the profile has no node events (was profiling enabled and the session run?)"
    if not placement.nodes.get(wanted):
        return f"no node ran on {wanted} ({placement.describe()})"
    if wanted == CPU:
        return ""
    heavy = sorted(op for op in placement.cpu_ops if op in HEAVY_OPS)
    if placement.encoder.get(CPU):
        return f"encoder nodes ran on the CPU ({placement.describe()})"
    if heavy:
        return f"compute on the CPU: {', '.join(heavy)} ({placement.describe()})"
    return ""
