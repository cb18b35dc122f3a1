"""Our onnxruntime SenseVoice engine against sherpa-onnx, providers, and hotword beam search."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from kitt_stt.asr.ctc import HotwordTrie, beam_search, greedy, tokenize_hotword
from kitt_stt.asr.engine import AsrRequest, DecodeOptions
from kitt_stt.asr.features import FeatureStream, log_mel
from kitt_stt.asr.ort_sense_voice import OrtSenseVoiceEngine
from kitt_stt.asr.providers import ProviderError, provider_chain, tensorrt_options
from kitt_stt.asr.sense_voice_model import ModelError, load_sense_voice_model
from kitt_stt.asr.sherpa_sense_voice import SherpaSenseVoiceEngine
from kitt_stt.config.schema import AppConfig, AsrConfig, Provider
from kitt_stt.hotwords import Hotword, parse_hotwords
from kitt_stt.models.tone_synth import TONE_PITCHES, ToneStyle, buzz, synthesize
from tests.random_sense_voice import build_random_model
from tests.test_tone_model import random_utterance

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md


def pcm(audio: np.ndarray) -> np.ndarray:
    return (np.clip(audio, -1, 1) * 32767).astype(np.int16)


def same(a, b) -> bool:
    return (a.text, a.tokens, a.timestamps, a.lang, a.emotion, a.event) == (
        b.text, b.tokens, b.timestamps, b.lang, b.emotion, b.event)


@pytest.fixture(scope="module")
def tone_engines(tone_dir: Path):
    model = load_sense_voice_model(tone_dir)
    return SherpaSenseVoiceEngine(model, "tone"), OrtSenseVoiceEngine(model, "tone", AsrConfig())


def test_tone_model_matches_sherpa_exactly(tone_engines) -> None:
    sherpa, ours = tone_engines
    rng = np.random.default_rng(99)
    for index in range(60):
        text, audio = random_utterance(rng, hardest=index % 2 == 0)
        options = DecodeOptions(language=("auto", "zh", "en", "ja")[index % 4], use_itn=bool(index % 3))
        request = AsrRequest(pcm(audio), options)
        expected, got = sherpa.decode_batch([request])[0], ours.decode_batch([request])[0]
        assert same(expected, got), (text, expected, got)
        assert got.text == text


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_weight_models_match_sherpa(tmp_path: Path, seed: int) -> None:
    build_random_model(tmp_path / "m", seed)
    model = load_sense_voice_model(tmp_path / "m")
    sherpa, ours = SherpaSenseVoiceEngine(model, "random"), OrtSenseVoiceEngine(model, "random", AsrConfig())
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(4):
        noise = rng.normal(0, rng.uniform(100, 8000), int(rng.integers(2000, 48000))).astype(np.int16)
        requests.append(AsrRequest(noise, DecodeOptions(language="en", use_itn=False)))
    for request in requests:
        assert same(sherpa.decode_batch([request])[0], ours.decode_batch([request])[0])


def test_batched_equals_one_by_one(tone_engines) -> None:
    _, ours = tone_engines
    texts = ["打开车门", "A", "关车窗DEF", "BB", "门"]
    requests = [AsrRequest(pcm(synthesize(t, ToneStyle(lead_ms=100 * i, tail_ms=300)))) for i, t in enumerate(texts)]
    batched = ours.decode_batch(requests)
    single = [ours.decode_batch([request])[0] for request in requests]
    assert batched == single
    assert [result.text for result in batched] == texts


def test_incremental_features_equal_batch_features() -> None:
    audio = pcm(synthesize("打开车门ABC", ToneStyle(snr_db=20)))
    stream = FeatureStream()
    for end in (1, 159, 160, 401, 5000, 5001, 17000, audio.shape[0]):
        frames = stream.frames_for(audio[:end])
    assert np.array_equal(frames, log_mel(audio))
    # an older, shorter request decoded after a newer one gets its prefix's frames
    for end in (100, 400, 5000, 17000):
        assert np.array_equal(stream.frames_for(audio[:end]), log_mel(audio[:end]))


def test_incremental_decode_equals_fresh_decode(tone_engines) -> None:
    _, ours = tone_engines
    audio = pcm(synthesize("打开车门", ToneStyle(tail_ms=300)))
    stream = FeatureStream()
    for end in (8000, 16000, audio.shape[0]):
        incremental = ours.decode_batch([AsrRequest(audio[:end], features=stream)])[0]
        fresh = ours.decode_batch([AsrRequest(audio[:end])])[0]
        assert same(incremental, fresh)


# ----- providers ---------------------------------------------------------------------------------

def test_tensorrt_options_are_exactly_as_documented() -> None:
    config = AsrConfig(provider=Provider.TENSORRT, max_batch=4)
    assert tensorrt_options(config) == {
        "device_id": "0",
        "trt_fp16_enable": "1",
        "trt_engine_cache_enable": "1",
        "trt_engine_cache_path": "/var/cache/kitt-stt/trt/engines",
        "trt_timing_cache_enable": "1",
        "trt_timing_cache_path": "/var/cache/kitt-stt/trt/timing",
        "trt_max_workspace_size": str(4096 * 1024 * 1024),
        "trt_builder_optimization_level": "3",
        "trt_profile_min_shapes": "x:1x1x560,x_length:1,language:1,text_norm:1",
        "trt_profile_opt_shapes": "x:1x100x560,x_length:1,language:1,text_norm:1",
        "trt_profile_max_shapes": "x:4x2000x560,x_length:4,language:4,text_norm:4",
    }
    chain = provider_chain(config)
    assert [name for name, _ in chain] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    assert provider_chain(AsrConfig(provider=Provider.CUDA))[0][1]["device_id"] == "0"
    assert "CPUExecutionProvider" not in [name for name, _ in chain]


@pytest.mark.parametrize("provider", [Provider.CUDA, Provider.TENSORRT])
def test_gpu_providers_refused_on_a_cpu_machine(tone_dir: Path, provider: Provider) -> None:
    model = load_sense_voice_model(tone_dir)
    with pytest.raises(ProviderError, match=f"asr.provider={provider.value}"):
        OrtSenseVoiceEngine(model, "tone", AsrConfig(provider=provider))


# ----- beam search and hotwords ------------------------------------------------------------------

def test_beam_without_hotwords_gives_the_greedy_text(tone_dir: Path, tone_engines) -> None:
    _, greedy_engine = tone_engines
    beam_engine = OrtSenseVoiceEngine(load_sense_voice_model(tone_dir), "tone",
                                      AsrConfig(decoding={"method": "beam", "max_active_paths": 4}))
    rng = np.random.default_rng(3)
    for _ in range(30):
        text, audio = random_utterance(rng, hardest=False)
        request = AsrRequest(pcm(audio))
        assert beam_engine.decode_batch([request])[0].text == greedy_engine.decode_batch([request])[0].text == text


def ambiguous_utterance() -> np.ndarray:
    """A, then a burst mixing the buzzes of 门 (30 %) and C (70 %), then B.

    The middle burst is a close call: the tone model scores C about 0.8 (natural log) above 门,
    well inside a hotword's boost, while clean bursts win by 15 or more.
    """
    mixed = 0.3 * buzz(TONE_PITCHES["门"], 200) + 0.7 * buzz(TONE_PITCHES["C"], 200)
    gap = np.zeros(1600, np.float32)
    audio = np.concatenate([np.zeros(4800, np.float32), buzz(TONE_PITCHES["A"], 200), gap, mixed, gap,
                            buzz(TONE_PITCHES["B"], 200), np.zeros(4800, np.float32)])
    return pcm(audio)


def test_hotword_tips_an_ambiguous_burst_only_when_set(tone_engines) -> None:
    _, ours = tone_engines
    audio = ambiguous_utterance()
    plain = ours.decode_batch([AsrRequest(audio)])[0].text
    assert plain == "ACB"
    loser = "门"
    biased = ours.decode_batch([AsrRequest(audio, DecodeOptions(hotwords=parse_hotwords([f"A{loser}B:3"])))])[0]
    assert biased.text == f"A{loser}B"
    unrelated = ours.decode_batch([AsrRequest(audio, DecodeOptions(hotwords=parse_hotwords(["DEF:3"])))])[0]
    assert unrelated.text == plain


def test_hotwords_never_insert_tokens_on_clean_input(tone_engines) -> None:
    _, ours = tone_engines
    hotwords = parse_hotwords(["打开车门:5", "关窗:5", "ABCDEF:5", "门:5"])
    rng = np.random.default_rng(11)
    for _ in range(20):
        text, audio = random_utterance(rng, hardest=False)
        assert ours.decode_batch([AsrRequest(pcm(audio), DecodeOptions(hotwords=hotwords))])[0].text == text
    silence = ours.decode_batch([AsrRequest(np.zeros(16000, np.int16), DecodeOptions(hotwords=hotwords))])[0]
    assert silence.text == ""


def test_partial_hotword_match_gets_no_lasting_bonus() -> None:
    # vocabulary: 0 blank, 1 x, 2 y, 3 z, 4 q.  Frame 1 is a close call, z 0.9 ahead of y.  The
    # hotword "x y q" pulls towards y, but its match fails at the next token (x, not q), so y
    # must not win on a bonus it did not keep; the finished hotword "x y" keeps its bonus.
    logits = np.full((5, 5), -20.0)
    logits[0, 1] = 0.0  # x
    logits[1, 2], logits[1, 3] = -0.9, 0.0  # y or z
    logits[2, 0] = 0.0  # blank
    logits[3, 1] = 0.0  # x
    logits[4, 0] = 0.0  # blank
    assert greedy(logits, 5).token_ids == [1, 3, 1]
    partial = HotwordTrie([([1, 2, 4], 2.0)])
    assert beam_search(logits, 5, beam=4, trie=partial).token_ids == [1, 3, 1]
    finished = HotwordTrie([([1, 2], 2.0)])
    assert beam_search(logits, 5, beam=4, trie=finished).token_ids == [1, 2, 1]


def test_hotword_tokenisation_uses_the_vocabulary() -> None:
    vocabulary = {"▁open": 5, "▁the": 6, "▁car": 7, "▁do": 8, "or": 9, "打": 10, "开": 11}
    assert tokenize_hotword(Hotword("open the door"), vocabulary) == [5, 6, 8, 9]
    assert tokenize_hotword(Hotword("打开"), vocabulary) == [10, 11]
    assert tokenize_hotword(Hotword("zzz"), vocabulary) == []


async def test_hotwords_over_the_websocket_apply_from_the_next_segment(server) -> None:
    from kitt_stt.client.session import connect
    from tests.helpers import FRAME_BYTES, collect_until, of_type, send_pcm, silence

    audio = np.concatenate([ambiguous_utterance(), np.zeros(16000, np.int16)]).astype("<i2").tobytes()
    audio += bytes((-len(audio)) % FRAME_BYTES)
    half = len(audio) // 2 - (len(audio) // 2) % FRAME_BYTES
    async with connect(server.url) as session:
        assert server.url and session.ready["model"]["kind"] == "tone"
        await send_pcm(session, audio)
        await session.configure(hotwords=["A门B:3"])  # mid-stream, between segments
        await send_pcm(session, audio[:half])
        await session.configure(hotwords=[])  # inside the next segment: takes effect only after it
        await send_pcm(session, audio[half:] + silence(200))
        await send_pcm(session, audio)
        frames = await collect_until(session, lambda fs: len(of_type(fs, "final")) == 3)
    assert [f["text"] for f in of_type(frames, "final")] == ["ACB", "A门B", "ACB"]


def test_ep_context_options_and_segment_profile_check(tmp_path: Path) -> None:
    from kitt_stt.asr.providers import check_profile_covers_segments, ep_context_options

    config = AsrConfig(provider=Provider.TENSORRT, max_batch=4)
    options = ep_context_options(config, tmp_path / "ctx.onnx")
    assert options["trt_dump_ep_context_model"] == "1"
    assert options["trt_ep_context_file_path"] == str(tmp_path / "ctx.onnx")
    assert options["trt_ep_context_embed_mode"] == "0"
    # onnxruntime reads the engine path relative to the EP-context model's directory while dumping,
    # and refuses to load an EP-context model whose engine path is absolute or leaves that directory
    assert options["trt_engine_cache_path"] == "."
    assert options["trt_profile_max_shapes"].startswith("x:4x2000x560")
    check_profile_covers_segments(config, 120_000)  # 2000 frames exactly
    with pytest.raises(ProviderError, match="profile_max_frames"):
        check_profile_covers_segments(config, 120_060)
    check_profile_covers_segments(AsrConfig(), 10_000_000)  # only TensorRT has a profile


def test_trt_build_fails_clearly_without_tensorrt(tmp_path: Path, model_cache: Path) -> None:
    import subprocess
    import sys

    config = tmp_path / "c.yaml"
    config.write_text(f"models:\n  cache_dir: {model_cache}\nasr:\n  model: tone\n")
    result = subprocess.run([sys.executable, "-m", "kitt_stt", "trt", "build", "--config", str(config)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "TensorrtExecutionProvider" in result.stderr and "Traceback" not in result.stderr


# ----- TensorRT engine cache: key, layout, trt build, serve lookup -------------------------------

KEY_FACTS = {"gpu_name": "NVIDIA GeForce RTX 4090", "compute_capability": "8.9", "tensorrt_version": "10.14.1",
             "onnxruntime_version": "1.26.0", "model_sha256": "ab" * 32}


def test_engine_key_directory_is_stable_and_changes_with_every_fact() -> None:
    from kitt_stt.ops.trt_key import EngineKey, engine_dir_name, timing_dir_name

    options = {"trt_fp16_enable": "1", "trt_profile_max_shapes": "x:4x2000x560"}
    name = engine_dir_name(EngineKey(**KEY_FACTS, build_options=options))
    assert name == engine_dir_name(EngineKey(**KEY_FACTS, build_options=dict(reversed(options.items()))))
    assert name.startswith("nvidia-geforce-rtx-4090-sm89_trt10.14.1_ort1.26.0_model-abababababab_k-")
    changed = [{"model_sha256": "cd" * 32}, {"tensorrt_version": "10.14.2"}, {"onnxruntime_version": "1.26.1"},
               {"gpu_name": "NVIDIA GeForce RTX 4080"}, {"compute_capability": "8.6"}]
    names = {engine_dir_name(EngineKey(**{**KEY_FACTS, **change}, build_options=options)) for change in changed}
    names.add(engine_dir_name(EngineKey(**KEY_FACTS, build_options={**options, "trt_fp16_enable": "0"})))
    assert len(names) == len(changed) + 1 and name not in names
    # same model prefix, different file: the whole-key hash still tells them apart
    assert engine_dir_name(EngineKey(**{**KEY_FACTS, "model_sha256": "ab" * 31 + "cd"})) != \
        engine_dir_name(EngineKey(**KEY_FACTS))
    assert timing_dir_name("Orin (nvgpu)", "8.7", "10.3.0") == "orin-nvgpu-sm87_trt10.3.0"


def test_build_options_are_the_engine_shaping_tensorrt_options() -> None:
    from kitt_stt.ops.trt_key import build_options

    options = build_options(tensorrt_options(AsrConfig(provider=Provider.TENSORRT, max_batch=4)))
    assert options == {"trt_fp16_enable": "1", "trt_max_workspace_size": str(4096 << 20),
                       "trt_builder_optimization_level": "3",
                       "trt_profile_min_shapes": "x:1x1x560,x_length:1,language:1,text_norm:1",
                       "trt_profile_opt_shapes": "x:1x100x560,x_length:1,language:1,text_norm:1",
                       "trt_profile_max_shapes": "x:4x2000x560,x_length:4,language:4,text_norm:4"}


def test_tensorrt_cache_paths_are_absolute_and_backward_compatible(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from kitt_stt.config.loader import load_config

    default = AsrConfig().tensorrt
    assert (default.engine_root(), default.timing_root()) == (Path("/var/cache/kitt-stt/trt/engines"),
                                                              Path("/var/cache/kitt-stt/trt/timing"))
    moved = AsrConfig(tensorrt={"cache_dir": str(tmp_path), "engine_cache_path": "old/engines",
                                "timing_cache_path": "/abs/timing"}).tensorrt
    assert (moved.engine_root(), moved.timing_root()) == (tmp_path / "old/engines", Path("/abs/timing"))
    monkeypatch.chdir(tmp_path)
    assert AsrConfig(tensorrt={"cache_dir": "rel"}).tensorrt.cache_dir == tmp_path / "rel"
    # what the GPU images set (Dockerfile, Dockerfile.orin) keeps working
    env = {"KITT_STT__ASR__TENSORRT__ENGINE_CACHE_PATH": "/var/cache/kitt-stt/trt/engines",
           "KITT_STT__ASR__TENSORRT__TIMING_CACHE_PATH": "/var/cache/kitt-stt/trt/timing"}
    trt = load_config(None, env=env).config.asr.tensorrt
    assert trt.engine_root() == Path("/var/cache/kitt-stt/trt/engines")


def fake_ep_context(path: Path, engine_name: str = "TRTKernel_graph_sm89.engine") -> Path:
    """An EP-context model as onnxruntime dumps it with embed mode 0: one EPContext node that
    references the engine file by a path relative to the model's directory."""
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("EPContext", ["x"], ["logits"], domain="com.microsoft", embed_mode=0,
                            ep_cache_context=f"./{engine_name}", main_context=1)
    graph = helper.make_graph([node], "ctx", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("logits", TensorProto.FLOAT, None)])
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(helper.make_model(graph), str(path))
    return path.parent / engine_name


def trt_host():
    from kitt_stt.ops.trt_cache import TrtHost

    return TrtHost("NVIDIA GeForce RTX 4090", "8.9", "10.14.1", "1.26.0")


def test_keyed_config_points_every_path_into_the_keyed_directory(tmp_path: Path) -> None:
    from kitt_stt.ops.trt_cache import keyed_asr, layout_for_model

    asr = AsrConfig(provider=Provider.TENSORRT, tensorrt={"cache_dir": str(tmp_path)})
    layout = layout_for_model(asr, Path("model.onnx"), trt_host(), model_sha256="ab" * 32)
    assert layout.engine_dir.parent == tmp_path / "engines" and layout.timing_dir.parent == tmp_path / "timing"
    keyed = keyed_asr(asr, layout)
    options = tensorrt_options(keyed)
    assert options["trt_engine_cache_path"] == str(layout.engine_dir)
    assert options["trt_timing_cache_path"] == str(layout.timing_dir)
    assert keyed.tensorrt.ep_context_model is None  # nothing built yet: build from the ONNX model
    engine = fake_ep_context(layout.ep_context_model)
    assert keyed_asr(asr, layout).tensorrt.ep_context_model is None  # its engine is missing: unusable
    engine.write_bytes(b"engine")
    assert keyed_asr(asr, layout).tensorrt.ep_context_model == layout.ep_context_model
    explicit = asr.model_copy(update={"tensorrt": asr.tensorrt.model_copy(update={"ep_context_model": Path("/x")})})
    assert keyed_asr(explicit, layout).tensorrt.ep_context_model == Path("/x")  # an explicit path wins


def test_trt_build_writes_engine_ep_context_and_manifest_into_the_keyed_directory(
        tmp_path: Path, tone_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The orchestration around onnxruntime (which needs a GPU): options, staging, rename, manifest,
    idempotence, stale engines cleared."""
    import json

    from kitt_stt.asr.providers import ep_context_options
    from kitt_stt.models.checksums import sha256_file
    from kitt_stt.ops import trt_cache

    calls = []

    def fake_build(model_path: Path, config: AsrConfig, output: Path) -> Path:
        calls.append((model_path, config, output, ep_context_options(config, output)))
        assert output.parent == config.tensorrt.engine_root()  # the engine lands beside the EP-context model
        fake_ep_context(output).write_bytes(b"engine")
        return output

    monkeypatch.setattr(trt_cache, "check_available", lambda provider: None)
    monkeypatch.setattr(trt_cache, "build_ep_context", fake_build)
    model = tone_dir / "model.onnx"
    asr = AsrConfig(provider=Provider.TENSORRT, tensorrt={"cache_dir": str(tmp_path)})
    result = trt_cache.build_keyed(model, asr, host=trt_host())
    layout = result.layout
    assert not result.reused and len(calls) == 1
    assert layout.ep_context_model.is_file() and not (layout.engine_dir / trt_cache.PARTIAL_NAME).exists()
    assert calls[0][2] == layout.engine_dir / trt_cache.PARTIAL_NAME
    options = calls[0][3]
    assert options["trt_ep_context_file_path"] == str(layout.engine_dir / trt_cache.PARTIAL_NAME)
    assert options["trt_engine_cache_path"] == "." and options["trt_timing_cache_path"] == str(layout.timing_dir)
    manifest = json.loads(layout.manifest.read_text())
    assert manifest["key"]["model_sha256"] == sha256_file(model)
    assert manifest["key"]["tensorrt_version"] == "10.14.1" and manifest["directory"] == layout.engine_dir.name
    assert manifest["ep_context_model"] == "model.trt_ctx.onnx"
    assert trt_cache.build_keyed(model, asr, host=trt_host()).reused and len(calls) == 1  # init container rerun
    stale = layout.engine_dir / "old_sm89.engine"
    stale.write_bytes(b"stale")
    assert not trt_cache.build_keyed(model, asr, force=True, host=trt_host()).reused and len(calls) == 2
    assert not stale.exists()


def test_serve_loads_the_ep_context_model_from_the_keyed_directory(
        tmp_path: Path, model_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kitt_stt.config.schema import AppConfig
    from kitt_stt.ops import trt_cache

    monkeypatch.setattr(trt_cache.ort, "get_available_providers",
                        lambda: ["TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(trt_cache, "probe_trt_host", lambda device_id: trt_host())
    config = AppConfig(models={"cache_dir": str(model_cache)},
                       asr={"model": "tone", "provider": "tensorrt", "tensorrt": {"cache_dir": str(tmp_path)}})
    first = trt_cache.prepare_serve(config).asr.tensorrt
    engine_dir = first.engine_root()
    assert engine_dir.parent == tmp_path / "engines" and first.ep_context_model is None
    assert (engine_dir / "key.json").is_file()  # written when the server builds, so the directory says what it is
    fake_ep_context(engine_dir / "model.trt_ctx.onnx").write_bytes(b"engine")
    assert trt_cache.prepare_serve(config).asr.tensorrt.ep_context_model == engine_dir / "model.trt_ctx.onnx"
    other_model = config.model_copy(update={"asr": config.asr.model_copy(update={"model": str(tmp_path / "m")})})
    build_random_model(tmp_path / "m", 1)
    assert trt_cache.prepare_serve(other_model).asr.tensorrt.engine_root() != engine_dir  # a new model: a new key
    assert trt_cache.prepare_serve(AppConfig()) == AppConfig()  # CPU: untouched


def test_a_configured_ep_context_model_that_is_missing_fails_start_up(tone_dir, tmp_path, monkeypatch) -> None:
    from kitt_stt.asr import factory

    config = AppConfig.model_validate({"asr": {"model": str(tone_dir), "provider": "tensorrt",
                                               "tensorrt": {"ep_context_model": str(tmp_path / "gone.onnx")}}})
    monkeypatch.setattr(factory, "check_available", lambda provider: None)  # as on a host with TensorRT
    with pytest.raises(ModelError, match="does not exist: run `kitt-stt trt build`"):
        factory.plan_engine(config)
