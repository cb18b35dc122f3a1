"""Whisper on our own onnxruntime sessions (asr/ort_whisper.py) against sherpa-onnx, the reference,
on the real whisper-base: the same greedy search over the same graphs, padded as sherpa-onnx pads
(``asr.whisper.padding: zeros``), must write the same text; the default padding, Whisper's own
silence level, must keep whisper-base from repeating itself on a short piece."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
import pytest

from kitt_stt.asr.engine import AsrRequest, DecodeOptions
from kitt_stt.asr.factory import build_engine, plan_engine
from kitt_stt.asr.language import TurnLanguage
from kitt_stt.asr.ort_whisper import OrtWhisperEngine, _reads, read_token_bytes
from kitt_stt.asr.providers import ProviderError
from kitt_stt.asr.sense_voice_model import ModelError
from kitt_stt.asr.sherpa_whisper import SherpaWhisperEngine
from kitt_stt.asr.whisper_graphs import padded_mel, silence_level
from kitt_stt.asr.whisper_model import load_whisper_model
from kitt_stt.audio.wavfile import read_wav_16k_mono
from kitt_stt.config.schema import AppConfig, AsrConfig

SPEECH = Path(__file__).parent / "fixtures" / "speech"
# the fixtures whose decode is not a near-tie (zh_jin_tian_tian_qi_zen_me_yang's first token is
# ahead of the next by 0.17 nats: sherpa-onnx's bundled onnxruntime and ours pick differently)
CLIPS = [("en_go_forward_ten_meters", "en"), ("en_open_the_car_door_please", "en"),
         ("en_turn_on_the_air_conditioning", "en"), ("zh_da_kai_che_men", "zh")]


@pytest.fixture(scope="module")
def engines(whisper_dir: Path) -> tuple[OrtWhisperEngine, SherpaWhisperEngine]:
    model = load_whisper_model(whisper_dir)
    reproduction = AsrConfig.model_validate({"whisper": {"padding": "zeros"}})
    return OrtWhisperEngine(model, "whisper", reproduction), SherpaWhisperEngine(model, "whisper")


ALSA_FRONT = Path("/usr/share/sounds/alsa/Front_Center.wav")  # alsa-utils: a human voice, "Front ... Center"


@pytest.mark.skipif(not ALSA_FRONT.is_file(), reason="alsa-utils' voices are not installed")
def test_the_default_padding_keeps_a_short_piece_from_repeating(whisper_dir: Path, tmp_path: Path) -> None:
    """The piece the server decodes when "Front" ends a segment: padded with zeros (sherpa-onnx's
    fill) whisper-base writes "Front Front Front"; padded with the log-mel of silence, "Front"."""
    from utils.performance.speech import to_16k

    front = to_16k(ALSA_FRONT, tmp_path / "front.wav")[: int(0.62 * 16000)]
    model = load_whisper_model(whisper_dir)
    request = [AsrRequest(front, DecodeOptions(language="en"))]
    texts = {padding: OrtWhisperEngine(model, "whisper", AsrConfig.model_validate({"whisper": {"padding": padding}}))
             .decode_batch(request)[0].text for padding in ("zeros", "whisper")}
    assert texts["zeros"].lower().count("front") >= 2
    assert texts["whisper"].lower().strip(" .") == "front"
    assert AsrConfig().whisper.padding.value == "whisper"


def test_the_padding_is_the_log_mel_of_silence() -> None:
    """Whisper floors its log-mel at the maximum less 8 (log10), less 2 once mapped by (x + 4) / 4."""
    mel = np.array([[0.5, 1.25], [0.75, -0.75]], dtype=np.float32)
    padded = padded_mel(mel, 3, silence_level(mel))
    assert padded.shape == (1, 2, 5) and np.all(padded[0, :, 2:] == np.float32(1.25 - 2.0))
    assert silence_level(np.zeros((80, 0), np.float32)) == 0.0  # no audio: nothing to be quieter than


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("clip", "language"), [*CLIPS, ("en_go_forward_ten_meters", "auto")])
def test_greedy_decode_matches_sherpa_onnx(engines: tuple[OrtWhisperEngine, SherpaWhisperEngine], clip: str,
                                           language: str) -> None:
    ours, reference = engines
    request = [AsrRequest(read_wav_16k_mono(SPEECH / f"{clip}.wav"), DecodeOptions(language=language))]
    got, expected = ours.decode_batch(request)[0], reference.decode_batch(request)[0]
    assert got.text and (got.text, got.lang, got.tokens) == (expected.text, expected.lang, expected.tokens)


def test_silence_and_a_whisper_window_of_speech_match_too(engines: tuple[OrtWhisperEngine, SherpaWhisperEngine]
                                                          ) -> None:
    """Half a second of silence, and speech past sherpa-onnx's 2950 frames (both keep the first
    29.5 s). No audio at all is an empty text here (sherpa-onnx crashes the process on it)."""
    ours, reference = engines
    speech = read_wav_16k_mono(SPEECH / "en_go_forward_ten_meters.wav")
    long = np.concatenate([np.zeros(16000 * 28, dtype=np.int16), speech])
    for samples in (np.zeros(8000, dtype=np.int16), long):
        request = [AsrRequest(samples, DecodeOptions(language="en"))]
        got, expected = ours.decode_batch(request)[0], reference.decode_batch(request)[0]
        assert (got.text, got.tokens) == (expected.text, expected.tokens)
    nothing = ours.decode_batch([AsrRequest(np.zeros(0, dtype=np.int16), DecodeOptions(language="en"))])[0]
    assert nothing.text == "" and nothing.tokens == []


def test_restricted_auto_detects_on_the_engines_own_sessions(whisper_dir: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """With allowed languages the language step runs on the decoding engine's sessions: one copy of
    the model, and the decode is in the language chosen within the set."""
    engine = build_engine(AppConfig.model_validate({"asr": {"model": str(whisper_dir), "engine": "ort"}}))
    assert isinstance(engine, OrtWhisperEngine)
    created: list[object] = []
    original = ort.InferenceSession.__init__

    def counting(self: ort.InferenceSession, *args: Any, **kwargs: Any) -> None:
        created.append(args[0])
        original(self, *args, **kwargs)

    monkeypatch.setattr(ort.InferenceSession, "__init__", counting)
    options = DecodeOptions(language="auto", languages=("zh", "en"))
    result = engine.decode_batch([AsrRequest(read_wav_16k_mono(SPEECH / "zh_da_kai_che_men.wav"), options)])[0]
    monkeypatch.undo()
    assert created == []  # the language step built no sessions of its own
    assert result.lang == "zh" and "車門" in result.text and result.lang_probability is not None


def test_engine_setting_picks_the_whisper_engine(whisper_dir: Path) -> None:
    """``ort`` (the default since 0.6.1) decodes Whisper on ours, with words; ``onnxruntime`` (what it
    meant for Whisper before) and ``sherpa`` on sherpa-onnx, without."""
    model = str(whisper_dir)

    def built(**asr: str) -> object:
        return build_engine(AppConfig.model_validate({"asr": {"model": model, **asr}}))

    assert isinstance(built(), OrtWhisperEngine) and isinstance(built(engine="ort"), OrtWhisperEngine)
    default = AppConfig.model_validate({"asr": {"model": model}})
    assert plan_engine(default).info.words  # ready.model.words before the engine is built, too
    for name in ("onnxruntime", "sherpa"):
        assert isinstance(built(engine=name), SherpaWhisperEngine)
        assert not plan_engine(AppConfig.model_validate({"asr": {"model": model, "engine": name}})).info.words
    with pytest.raises(ModelError, match="greedily"):
        built(engine="ort", decoding={"method": "beam"})  # type: ignore[arg-type]
    if "CUDAExecutionProvider" not in ort.get_available_providers():  # the placement check, as for SenseVoice
        with pytest.raises(ProviderError, match="CUDAExecutionProvider"):
            built(engine="ort", provider="cuda")


def test_token_table_and_padding(whisper_dir: Path) -> None:
    table = read_token_bytes(str(load_whisper_model(whisper_dir).tokens_path))
    assert table[220] == b" " and 50257 not in table  # text tokens only: specials never reach the text
    mel = np.ones((80, 5), dtype=np.float32)
    padded = padded_mel(mel, 3)
    assert padded.shape == (1, 80, 8) and padded[0, :, 5:].sum() == 0 and padded[0, :, :5].sum() == 400
    assert padded_mel(np.ones((80, 2990), dtype=np.float32), 700).shape == (1, 80, 3000)
    assert padded_mel(np.zeros((80, 0), dtype=np.float32), 0).shape == (1, 80, 2)


def test_one_encoder_pass_gives_language_no_speech_and_text(whisper_dir: Path, monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    """"auto" within zh and en: the language and the no-speech probability come from the decode's
    own encoder output (one pass), except where the segment's decision must read audio the piece
    does not hold (its start, before a closed chunk): then one language pass on that audio."""
    ours = build_engine(AppConfig.model_validate({"asr": {"model": str(whisper_dir), "engine": "ort"}}))
    assert isinstance(ours, OrtWhisperEngine)
    graphs = ours._graphs
    encodes: list[int] = []
    original = graphs.encode

    def counting(mel: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        encodes.append(mel.shape[2])
        return original(mel)

    monkeypatch.setattr(graphs, "encode", counting)
    options = DecodeOptions(language="auto", languages=("zh", "en"))
    speech = read_wav_16k_mono(SPEECH / "zh_da_kai_che_men.wav")
    [spoken] = ours.decode_batch([AsrRequest(speech, options)])
    assert len(encodes) == 1 and spoken.lang == "zh" and "車門" in spoken.text
    [quiet] = ours.decode_batch([AsrRequest(np.zeros(16000, dtype=np.int16), options)])
    assert spoken.no_speech_probability is not None and quiet.no_speech_probability is not None
    assert spoken.no_speech_probability < 0.5 < quiet.no_speech_probability  # measured: 0.19 and 0.79

    encodes.clear()
    segment = np.concatenate([read_wav_16k_mono(SPEECH / "zh_jin_tian_tian_qi_zen_me_yang.wav"), speech])
    later = DecodeOptions(language="auto", languages=("zh", "en"),
                          segment_language=TurnLanguage().segment(audio=lambda: segment))
    [result] = ours.decode_batch([AsrRequest(speech, later)])  # the piece after a chunk
    assert len(encodes) == 2 and result.lang == "zh"
    encodes.clear()
    [result] = ours.decode_batch([AsrRequest(segment, later)])  # decided: nothing more to detect
    assert len(encodes) == 1 and result.lang == "zh"


def test_when_a_piece_can_answer_for_the_segment() -> None:
    audio = np.arange(40000, dtype=np.int16)
    assert _reads(audio, audio, 28800)  # the segment so far is the piece
    assert _reads(audio[:30000], audio, 28800)  # its start, with what the decision reads
    assert not _reads(audio[:20000], audio, 28800)  # a first chunk shorter than the decision point
    assert _reads(audio[:20000], audio[:20000], 28800)  # an early guess on all there is
    assert not _reads(audio[10000:], audio, 28800)  # a piece after a closed chunk


def test_tensorrt_takes_the_encoder_and_cuda_the_decoder() -> None:
    """The provider chains as a GPU host would get them (built on this CPU, not run): TensorRT gets
    the encoder with a profile over Whisper's mel lengths, the decoder runs on CUDA."""
    from kitt_stt.asr.whisper_graphs import WINDOW_FRAMES, _chains

    encoder, decoder, checked = _chains(AsrConfig.model_validate({"provider": "tensorrt"}))
    assert [name for name, _ in encoder] == ["TensorrtExecutionProvider", "CUDAExecutionProvider"]
    assert [name for name, _ in decoder] == ["CUDAExecutionProvider"] and checked.value == "cuda"
    profile = encoder[0][1]
    assert (profile["trt_profile_min_shapes"], profile["trt_profile_max_shapes"]) == (
        "mel:1x80x2", f"mel:1x80x{WINDOW_FRAMES}")
    cuda = _chains(AsrConfig.model_validate({"provider": "cuda"}))
    assert [name for name, _ in cuda[0]] == [name for name, _ in cuda[1]] == ["CUDAExecutionProvider"]


def test_an_export_without_the_alignment_output_decodes_without_words(whisper_dir: Path, tmp_path: Path) -> None:
    """A revision-1 export (before cross_qk) still decodes; it says it times no words."""
    import onnx

    old = tmp_path / "whisper-r1"
    old.mkdir()
    for file in whisper_dir.iterdir():
        if file.is_file() and "decoder" not in file.name:
            (old / file.name).symlink_to(file)
    decoder = next(whisper_dir.glob("*decoder*.onnx"))
    graph = onnx.load(str(decoder))
    kept = [output for output in graph.graph.output if output.name != "cross_qk"]
    assert len(kept) == len(graph.graph.output) - 1
    del graph.graph.output[:]
    graph.graph.output.extend(kept)
    onnx.save(graph, str(old / decoder.name))
    engine = build_engine(AppConfig.model_validate({"asr": {"model": str(old)}}))
    assert isinstance(engine, OrtWhisperEngine) and not engine.info.words
    speech = read_wav_16k_mono(SPEECH / "en_go_forward_ten_meters.wav")
    result = engine.decode_batch([AsrRequest(speech, DecodeOptions(language="en", words=True))])[0]
    assert "forward" in result.text.lower() and result.words == ()
