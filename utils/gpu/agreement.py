"""Do the providers agree? The same audio through the service's engine on each provider, token
sequences compared with the CPU's.

    python -m utils.gpu.agreement decode --provider cuda --model DIR --config run.yaml --out cuda.json
    python -m utils.gpu.agreement compare cpu.json cuda.json tensorrt.json

``decode`` (one process per provider, so each gets a clean CUDA context) runs
``OrtSenseVoiceEngine`` - the class ``kitt-stt serve`` decodes with - over fixed clips: the tone
phrase at 3, 6 and 15 s and two seeded noise clips, each alone and all together as one batch (the
production ``max_batch`` pads them). TensorRT loads the EP-context model ``trt build`` wrote.
``compare`` gives per provider the exact-match rate of token sequences and the character error
rate of the texts against the CPU. fp32 CUDA kernels sum in another order than the CPU's, so a
near tie may flip; fp16 TensorRT changes the arithmetic itself. The stated tolerances are below.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

#: provider -> (minimum exact-match rate of token sequences, maximum character error rate) vs the CPU
TOLERANCE = {"cuda": (0.9, 0.01), "tensorrt": (0.6, 0.05)}
CLIP_SECONDS = (3.0, 6.0, 15.0)


def clips() -> dict[str, Any]:
    import numpy as np

    from utils.gpu.arm import PAUSE_MS, PHRASE
    from utils.performance.workload import build_utterance

    out = {}
    for seconds in CLIP_SECONDS:
        pcm, _ = build_utterance(seconds, PHRASE, None, PAUSE_MS)
        out[f"tone {seconds:g} s"] = np.frombuffer(pcm, dtype="<i2").copy()
    rng = np.random.default_rng(24)
    for seconds in (2.0, 8.0):
        noise = np.cumsum(rng.standard_normal(int(16000 * seconds)))  # brown noise: energy where speech has it
        noise = noise - np.convolve(noise, np.ones(400) / 400, mode="same")
        out[f"noise {seconds:g} s"] = (noise / (np.abs(noise).max() + 1e-9) * 8000).astype(np.int16)
    return out


def decode(provider: str, model_dir: Path, config_path: Path, out: Path) -> None:
    from kitt_stt.asr.engine import AsrRequest
    from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
    from kitt_stt.asr.sense_voice_model import load_sense_voice_model
    from kitt_stt.config.loader import load_config
    from kitt_stt.config.schema import Provider
    from utils.gpu.session_probe import session_target

    asr = load_config(config_path, env={}).config.asr.model_copy(update={"provider": Provider(provider)})
    model = load_sense_voice_model(model_dir, prefer_int8=False)
    asr, _, _ = session_target(asr, model.model_path, "ctx")
    engine = OrtSenseVoiceEngine(model, "sense_voice", asr)
    audio = clips()
    single = {name: engine.decode_batch([AsrRequest(samples)])[0] for name, samples in audio.items()}
    batch = engine.decode_batch([AsrRequest(samples) for samples in audio.values()][: asr.max_batch])
    results = {name: {"tokens": result.tokens, "text": result.text} for name, result in single.items()}
    results.update({f"{name} (batch)": {"tokens": result.tokens, "text": result.text}
                    for name, result in zip(audio, batch, strict=False)})
    out.write_text(json.dumps({"provider": provider, "clips": results}, ensure_ascii=False, indent=1))


def edit_distance(first: str, second: str) -> int:
    previous = list(range(len(second) + 1))
    for i, a in enumerate(first, start=1):
        current = [i]
        for j, b in enumerate(second, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (a != b)))
        previous = current
    return previous[-1]


def compare(reference: dict[str, Any], other: dict[str, Any]) -> dict[str, Any]:
    """Exact-match rate of token sequences and CER of the texts, ``other`` against ``reference``."""
    names = sorted(set(reference["clips"]) & set(other["clips"]))
    exact = sum(reference["clips"][n]["tokens"] == other["clips"][n]["tokens"] for n in names)
    errors = sum(edit_distance(reference["clips"][n]["text"], other["clips"][n]["text"]) for n in names)
    characters = sum(len(reference["clips"][n]["text"]) for n in names)
    provider = other["provider"]
    match_rate = exact / len(names) if names else 0.0
    cer = errors / characters if characters else float(errors > 0)
    minimum, maximum = TOLERANCE.get(provider, (1.0, 0.0))
    return {"provider": provider, "reference": reference["provider"], "clips": len(names), "exact": exact,
            "exact_rate": round(match_rate, 3), "cer": round(cer, 4),
            "tolerance": {"exact_rate": minimum, "cer": maximum},
            "within_tolerance": match_rate >= minimum and cer <= maximum,
            "differs": [n for n in names if reference["clips"][n]["tokens"] != other["clips"][n]["tokens"]][:5]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("decode")
    run.add_argument("--provider", required=True, choices=["cpu", "cuda", "tensorrt"])
    run.add_argument("--model", type=Path, required=True)
    run.add_argument("--config", type=Path, required=True)
    run.add_argument("--out", type=Path, required=True)
    check = commands.add_parser("compare")
    check.add_argument("files", type=Path, nargs="+")
    args = parser.parse_args(argv)
    if args.command == "decode":
        decode(args.provider, args.model, args.config, args.out)
        return 0
    loaded = [json.loads(path.read_text()) for path in args.files]
    for other in loaded[1:]:
        print(json.dumps(compare(loaded[0], other), ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
