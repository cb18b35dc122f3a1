"""The ``kitt-stt`` command: serve, config show, models, transcribe, trt build, doctor."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import yaml

from kitt_stt.cli_common import fail as _fail
from kitt_stt.cli_models import add_model_commands
from kitt_stt.config.loader import ConfigError, load_config


def cmd_serve(args: argparse.Namespace) -> int:
    from kitt_stt.logs import configure_logging
    from kitt_stt.observability.trace import TracePathError, check_trace_path

    try:
        config = load_config(args.config).config
    except ConfigError as exc:
        return _fail(str(exc))
    log_buffer = configure_logging(config)
    if config.tracing.enabled:  # before the minutes an engine build may take, not at the first flush
        try:
            check_trace_path(config.tracing.path)
        except TracePathError as exc:
            return _fail(str(exc))
    host = args.host or config.server.host
    port = config.server.port if args.port is None else args.port
    if config.server.workers > 1:  # each worker process loads its own models; this one none (server/workers.py)
        from kitt_stt.server.workers import serve_workers

        return serve_workers(config, host, port)
    from kitt_stt.server.runner import run
    from kitt_stt.server.startup import StartupError, load_app

    try:
        app = load_app(config, log_buffer)
    except StartupError as exc:
        return _fail(str(exc))
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
                               language=args.language, on_frame=printer(), words=args.words,
                               on_notice=lambda notice: print(f"kitt-stt: note: {notice}", file=sys.stderr)))
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
                         "(Whisper on ours takes asr.provider: tensorrt at start-up; its encoder engine is built then)")
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

    add_model_commands(commands)

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
