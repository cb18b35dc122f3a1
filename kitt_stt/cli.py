"""The ``kitt-stt`` command: serve, config show, models, transcribe, trt build, doctor."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import yaml

from kitt_stt.config.loader import ConfigError, load_config

EXIT_USAGE = 2


def _fail(message: str) -> int:
    print(f"kitt-stt: error: {message}", file=sys.stderr)
    return EXIT_USAGE


def cmd_serve(args: argparse.Namespace) -> int:
    from kitt_stt.asr.factory import plan_engine
    from kitt_stt.asr.providers import ProviderError
    from kitt_stt.asr.sense_voice_model import ModelError
    from kitt_stt.logs import configure_logging
    from kitt_stt.models.vad_model import prepare_vad
    from kitt_stt.ops.trt_cache import prepare_serve
    from kitt_stt.server.app import create_app
    from kitt_stt.server.runner import run
    from kitt_stt.turn.combiner import CombinerError
    from kitt_stt.turn.policy_factory import build_policy
    from kitt_stt.turnsense.model import TurnModelError
    from kitt_stt.turnsense.runner import build_turn_model

    try:
        config = load_config(args.config).config
    except ConfigError as exc:
        return _fail(str(exc))
    log_buffer = configure_logging(config)
    started = time.perf_counter()
    try:
        config = prepare_serve(config)  # TensorRT: the keyed engine directory, its EP-context model if built
        plan = plan_engine(config)  # checks now; the engine itself is built once /healthz answers
    except (ModelError, ProviderError, ValueError, OSError) as exc:
        return _fail(f"cannot load the ASR model: {exc}")
    try:
        turn_model = build_turn_model(config)
    except (ModelError, TurnModelError) as exc:
        return _fail(f"cannot load the end-of-turn model: {exc}")
    try:
        build_policy(config, turn_model is not None)  # each connection builds its own; refuse bad weights now
    except CombinerError as exc:
        return _fail(f"cannot load the end-of-turn decision: {exc}")
    try:
        config = prepare_vad(config)
    except ModelError as exc:
        return _fail(f"cannot load the VAD model: {exc}")
    host = args.host or config.server.host
    port = config.server.port if args.port is None else args.port
    app = create_app(config, plan, turn_model, log_buffer=log_buffer, load_seconds=time.perf_counter() - started)
    run(app, host, port, config.server.max_message_bytes, config.logging.level)
    return 0


def cmd_config_show(args: argparse.Namespace) -> int:
    try:
        loaded = load_config(args.config)
    except ConfigError as exc:
        return _fail(str(exc))
    data = loaded.config.model_dump(mode="json")
    if args.json:
        print(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        if loaded.files:
            print("# merged from: " + " <- ".join(str(path) for path in reversed(loaded.files)))
        print(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), end="")
    return 0


def cmd_models_build(args: argparse.Namespace) -> int:
    from kitt_stt.models.sensevoice_bench import build_sensevoice_bench
    from kitt_stt.models.tone_model import build_tone_model

    builders = {"tone": build_tone_model, "sensevoice-bench": build_sensevoice_bench}
    if args.name == "sensevoice-bench":
        print("building the SenseVoice-shaped benchmark model (about a minute, ~5 GB of memory) ...", flush=True)
    try:
        digests = builders[args.name](Path(args.out))
    except RuntimeError as exc:
        return _fail(str(exc))
    for name, digest in digests.items():
        print(f"{digest}  {Path(args.out) / name}")
    return 0


def cmd_models_convert_whisper(args: argparse.Namespace) -> int:
    from kitt_stt.models.ct2_reader import Ct2FormatError
    from kitt_stt.models.whisper_export import convert_whisper
    from kitt_stt.models.whisper_vocab import VocabularyError

    source = Path(args.ct2_dir)
    missing = [name for name in ("model.bin", "vocabulary.txt") if not (source / name).is_file()]
    if missing:
        return _fail(f"{source}: not a CTranslate2 Whisper directory (missing {', '.join(missing)})")
    try:
        digests = convert_whisper(source / "model.bin", source / "vocabulary.txt", Path(args.out), prefix=args.prefix)
    except (Ct2FormatError, VocabularyError, ValueError, RuntimeError) as exc:
        return _fail(str(exc))
    for name, digest in digests.items():
        print(f"{digest}  {Path(args.out) / name}")
    print(f"set asr.model: {args.out}")
    return 0


def cmd_models_prepare(args: argparse.Namespace) -> int:
    from kitt_stt.asr.sense_voice_model import ModelError
    from kitt_stt.models.registry import resolve_model
    from kitt_stt.models.vad_model import resolve_vad_model

    try:
        config = load_config(args.config).config
        resolved = [resolve_model(config.asr.model, config.models)]
        if config.turn.model:
            resolved.append(resolve_model(config.turn.model, config.models, setting="turn.model",
                                          directory_kind="turnsense"))
        vad_model = resolve_vad_model(config)
        if vad_model is not None:
            resolved.append(vad_model)
    except (ConfigError, ModelError) as exc:
        return _fail(str(exc))
    for model in resolved:
        print(f"{model.name} ({model.kind}): {model.directory}")
    return 0


def cmd_models_pull(args: argparse.Namespace) -> int:
    from kitt_stt.asr.sense_voice_model import ModelError
    from kitt_stt.models.registry import REGISTRY, resolve_model

    if args.name not in REGISTRY:
        return _fail(f"unknown model {args.name!r}; registry models: {', '.join(sorted(REGISTRY))}")
    try:
        config = load_config(args.config).config
        resolved = resolve_model(args.name, config.models, setting="models pull")
    except (ConfigError, ModelError) as exc:
        return _fail(str(exc))
    print(f"{resolved.name} ({resolved.kind}): {resolved.directory}")
    return 0


def _installed(args: argparse.Namespace) -> tuple[Path, set[str]]:
    """The model cache of the config in ``args`` and the registry models installed there."""
    from kitt_stt.models.registry import REGISTRY, default_cache_dir, is_current

    config = load_config(args.config).config
    cache = config.models.cache_dir or default_cache_dir()
    return cache, {name for name, entry in REGISTRY.items() if is_current(entry, cache / name)}


def cmd_models_verify(args: argparse.Namespace) -> int:
    from kitt_stt.models.registry import REGISTRY, verify_installed

    try:
        cache, installed = _installed(args)
    except ConfigError as exc:
        return _fail(str(exc))
    names = [args.name] if args.name else [name for name in REGISTRY if name in installed]
    failed = False
    for name in names:
        problems = verify_installed(cache / name)
        failed |= bool(problems)
        print(f"{name}: {'ok' if not problems else 'FAILED'}")
        for problem in problems:
            print(f"  {problem}")
    return 1 if failed else 0


def cmd_models_list(args: argparse.Namespace) -> int:
    from kitt_stt.models.registry import REGISTRY

    try:
        _, installed = _installed(args)
    except ConfigError as exc:
        return _fail(str(exc))
    for entry in REGISTRY.values():
        state = "installed" if entry.name in installed else "not installed"
        print(f"{entry.name:<16} {entry.kind:<12} {state:<14} {entry.description}  [{entry.licence}]")
    return 0


def cmd_synth(args: argparse.Namespace) -> int:
    from kitt_stt.audio.wavfile import write_wav_16k_mono
    from kitt_stt.models.tone_synth import ToneStyle, synthesize

    style = ToneStyle(burst_ms=args.burst_ms, gap_ms=args.gap_ms, peak=args.peak, lead_ms=args.lead_ms,
                      tail_ms=args.tail_ms, snr_db=args.snr_db)
    try:
        audio = synthesize(args.text, style)
    except ValueError as exc:
        return _fail(str(exc))
    write_wav_16k_mono(Path(args.out), (audio * 32767.0).astype("<i2"))
    print(f"wrote {args.out}: {audio.shape[0] / 16000:.2f} s")
    return 0


def cmd_transcribe(args: argparse.Namespace) -> int:
    from kitt_stt.audio.wavfile import WavFormatError, read_wav_16k_mono
    from kitt_stt.client.transcribe import printer, transcribe

    try:
        samples = read_wav_16k_mono(Path(args.file))
    except (OSError, WavFormatError) as exc:
        return _fail(str(exc))
    try:
        asyncio.run(transcribe(args.url, samples, seat=args.seat, realtime=args.realtime, token=args.token,
                               language=args.language, on_frame=printer(), words=args.words))
    except (OSError, ConnectionError) as exc:
        return _fail(f"cannot stream to {args.url}: {exc}")
    except Exception as exc:  # websockets raises its own hierarchy for refused upgrades
        return _fail(f"session with {args.url} failed: {exc}")
    return 0


def cmd_trt_build(args: argparse.Namespace) -> int:
    from kitt_stt.asr.providers import ProviderError, build_ep_context, check_available
    from kitt_stt.asr.sense_voice_model import ModelError, load_sense_voice_model
    from kitt_stt.config.schema import Provider
    from kitt_stt.models.registry import resolve_model
    from kitt_stt.ops.trt_cache import build_keyed

    try:
        config = load_config(args.config).config
        check_available(Provider.TENSORRT)  # fail fast on a host that cannot build, before any model work
        resolved = resolve_model(config.asr.model, config.models)
        if resolved.kind == "whisper":
            return _fail(f"asr.model={config.asr.model} is a Whisper model; TensorRT engines are built for SenseVoice "
                         "(Whisper runs on sherpa-onnx, CPU)")
        model = load_sense_voice_model(resolved.directory, prefer_int8=False)
        asr = config.asr.model_copy(update={"provider": Provider.TENSORRT})
        print(f"building the TensorRT engine for {model.model_path} (about a minute on an Orin) ...", flush=True)
        started = time.perf_counter()
        if args.out:  # an explicit place: the engine goes next to it, the server needs ep_context_model set
            output = build_ep_context(model.model_path, asr, Path(args.out).absolute())
            print(f"wrote {output} and its engine beside it in {time.perf_counter() - started:.0f} s; "
                  f"set asr.tensorrt.ep_context_model: {output}")
            return 0
        result = build_keyed(model.model_path, asr, force=args.force)
    except (ConfigError, ModelError, ProviderError, OSError) as exc:
        return _fail(str(exc))
    layout = result.layout
    if result.reused:
        print(f"already built for this model, GPU and TensorRT: {layout.ep_context_model} (--force rebuilds)")
    else:
        print(f"wrote {layout.ep_context_model}, its engine and {layout.manifest.name} in {result.seconds:.0f} s "
              f"(timing cache: {layout.timing_dir})")
    print("kitt-stt serve loads it from there while asr.tensorrt.ep_context_model is unset")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    from kitt_stt.ops.doctor import run_doctor
    from kitt_stt.ops.report import render_json, render_table

    try:
        loaded = load_config(args.config)
    except ConfigError as exc:
        return _fail(str(exc))
    label = " <- ".join(str(path) for path in reversed(loaded.files)) if loaded.files else "built-in defaults"
    report = run_doctor(loaded.config, label, no_device=args.no_device)
    print(render_json(report) if args.json else render_table(report), end="")
    return report.exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kitt-stt", description="Streaming speech-to-text service")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the WebSocket service")
    serve.add_argument("--config", help="config file (default: $KITT_STT_CONFIG, else built-in defaults)")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    serve.set_defaults(handler=cmd_serve)

    config = commands.add_parser("config", help="inspect configuration")
    config_commands = config.add_subparsers(dest="config_command", required=True)
    show = config_commands.add_parser("show", help="print the effective merged configuration")
    show.add_argument("--config")
    show.add_argument("--json", action="store_true", help="print JSON instead of YAML")
    show.set_defaults(handler=cmd_config_show)

    models = commands.add_parser("models", help="manage models")
    model_commands = models.add_subparsers(dest="models_command", required=True)
    build = model_commands.add_parser("build", help="generate a synthetic model")
    build.add_argument("name", choices=["tone", "sensevoice-bench"])
    build.add_argument("--out", required=True, help="output directory")
    build.set_defaults(handler=cmd_models_build)

    synth = commands.add_parser("synth", help="speak text in the tone language (for the tone model) to a WAV")
    synth.add_argument("text", help="characters of 打开关车门窗ABCDEF")
    synth.add_argument("out", help="output WAV path (16 kHz mono int16)")
    synth.add_argument("--burst-ms", type=float, default=200.0)
    synth.add_argument("--gap-ms", type=float, default=100.0)
    synth.add_argument("--peak", type=float, default=0.5)
    synth.add_argument("--lead-ms", type=float, default=500.0)
    synth.add_argument("--tail-ms", type=float, default=1000.0)
    synth.add_argument("--snr-db", type=float, default=None, help="add white noise at this SNR")
    synth.set_defaults(handler=cmd_synth)

    pull = model_commands.add_parser("pull", help="install a registry model into the cache (idempotent)")
    pull.add_argument("name")
    pull.add_argument("--config")
    pull.set_defaults(handler=cmd_models_pull)
    verify = model_commands.add_parser("verify", help="re-check installed models against their recorded sha256")
    verify.add_argument("name", nargs="?")
    verify.add_argument("--config")
    verify.set_defaults(handler=cmd_models_verify)
    listing = model_commands.add_parser("list", help="registry models and whether they are installed")
    listing.add_argument("--config")
    listing.set_defaults(handler=cmd_models_list)

    convert = model_commands.add_parser(
        "convert-whisper", help="convert a multilingual CTranslate2 (faster-whisper) Whisper directory to sherpa-onnx")
    convert.add_argument("ct2_dir", help="directory with model.bin (format 6) and vocabulary.txt")
    convert.add_argument("--out", required=True)
    convert.add_argument("--prefix", default="whisper", help="file name prefix: PREFIX-encoder.onnx, ...")
    convert.set_defaults(handler=cmd_models_convert_whisper)

    prepare = model_commands.add_parser("prepare", help="install the configured asr.model, turn.model and vad.model")
    prepare.add_argument("--config")
    prepare.set_defaults(handler=cmd_models_prepare)

    trt = commands.add_parser("trt", help="TensorRT tools")
    trt_commands = trt.add_subparsers(dest="trt_command", required=True)
    trt_build = trt_commands.add_parser("build", help="build the engine ahead of time and write an EP-context model")
    trt_build.add_argument("--config")
    trt_build.add_argument("--out", help="write the EP-context model (and the engine beside it) here instead of "
                                         "the keyed directory under asr.tensorrt.cache_dir")
    trt_build.add_argument("--force", action="store_true", help="rebuild even if this key's EP-context model exists")
    trt_build.set_defaults(handler=cmd_trt_build)

    doctor = commands.add_parser("doctor", help="what this host can run, checked against the configuration")
    doctor.add_argument("--config")
    doctor.add_argument("--no-device", action="store_true",
                        help="image builds: check libraries, providers, models and caches, not that a GPU is attached")
    doctor.add_argument("--json", action="store_true", help="print JSON instead of the table")
    doctor.set_defaults(handler=cmd_doctor)

    transcribe = commands.add_parser("transcribe", help="stream a WAV file and print the results")
    transcribe.add_argument("file")
    transcribe.add_argument("--url", default="ws://127.0.0.1:8000/stt/sensevoice")
    transcribe.add_argument("--seat", default="default")
    transcribe.add_argument("--realtime", action="store_true", help="pace at real time (default: as fast as allowed)")
    transcribe.add_argument("--token", help="bearer token, if the server requires one")
    transcribe.add_argument("--language", help="language hint (auto, zh, en, ...)")
    transcribe.add_argument("--words", action="store_true",
                            help="ask for word timings and confidence and print each final's words")
    transcribe.set_defaults(handler=cmd_transcribe)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.handler(args))


if __name__ == "__main__":
    sys.exit(main())
