"""``kitt-stt models``: build, pull, prepare, verify, list and convert the models the service runs."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kitt_stt.cli_common import fail as _fail
from kitt_stt.config.loader import ConfigError, load_config


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
    from kitt_stt.turn.combiner import CombinerError
    from kitt_stt.turn.policy_factory import text_model_spec

    try:
        config = load_config(args.config).config
        resolved = [resolve_model(config.asr.model, config.models)]
        if config.turn.model:
            resolved.append(resolve_model(config.turn.model, config.models, setting="turn.model",
                                          directory_kind="turnsense"))
        text_model = text_model_spec(config, has_model=config.turn.model is not None)
        if text_model is not None:
            resolved.append(resolve_model(text_model, config.models, setting="turn.text_model",
                                          directory_kind="turn_text"))
        vad_model = resolve_vad_model(config)
        if vad_model is not None:
            resolved.append(vad_model)
    except (ConfigError, ModelError, CombinerError) as exc:
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
    """The model cache of the config in ``args`` and the registry models with a complete install
    there (of any revision: an outdated build's files are still checked by ``verify``)."""
    from kitt_stt.models.registry import REGISTRY, default_cache_dir, installed_revision

    config = load_config(args.config).config
    cache = config.models.cache_dir or default_cache_dir()
    return cache, {name for name in REGISTRY if installed_revision(cache / name) is not None}


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
    from kitt_stt.models.registry import REGISTRY, is_current

    try:
        cache, installed = _installed(args)
    except ConfigError as exc:
        return _fail(str(exc))
    for entry in REGISTRY.values():
        state = "not installed"
        if entry.name in installed:  # an older build of a generated model is rebuilt on the next start
            state = "installed" if is_current(entry, cache / entry.name) else "outdated"
        print(f"{entry.name:<16} {entry.kind:<12} {state:<14} {entry.description}  [{entry.licence}]")
    return 0


def add_model_commands(commands: Any) -> None:
    """The ``models`` subcommands, on the top-level parser's subparsers."""
    models = commands.add_parser("models", help="manage models")
    model_commands = models.add_subparsers(dest="models_command", required=True)
    build = model_commands.add_parser("build", help="generate a synthetic model")
    build.add_argument("name", choices=["tone", "sensevoice-bench"])
    build.add_argument("--out", required=True, help="output directory")
    build.set_defaults(handler=cmd_models_build)

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

    prepare = model_commands.add_parser(
        "prepare", help="install the configured asr.model, turn.model, turn.text_model and vad.model")
    prepare.add_argument("--config")
    prepare.set_defaults(handler=cmd_models_prepare)
