"""Config files, overlays, environment overrides and their error messages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kitt_stt.config.loader import ConfigError, load_config
from kitt_stt.config.schema import Provider

pytestmark = pytest.mark.py310  # also run on Python 3.10: see docs/testing.md

REPO = Path(__file__).resolve().parent.parent


def write(path: Path, data: dict | str) -> Path:
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data))
    return path


def test_overlay_deep_merges_over_its_base(tmp_path: Path) -> None:
    write(tmp_path / "base.yaml", {"server": {"port": 9000, "host": "0.0.0.0"}, "vad": {"silence_ms": 700},
                                   "asr": {"hotwords": ["a", "b"]}})
    (tmp_path / "site").mkdir()
    overlay = write(tmp_path / "site" / "overlay.yaml",
                    {"extends": "../base.yaml", "server": {"port": 9100}, "asr": {"hotwords": ["c"]}})
    loaded = load_config(overlay, env={})
    config = loaded.config
    assert config.server.port == 9100  # overlay wins
    assert config.server.host == "0.0.0.0"  # sibling key of the base survives
    assert config.vad.silence_ms == 700  # untouched section comes from the base
    assert config.asr.hotwords == ["c"]  # lists replace, they do not append
    assert loaded.files == [overlay.resolve(), (tmp_path / "base.yaml").resolve()]


def test_absolute_extends_and_env_overrides(tmp_path: Path) -> None:
    base = write(tmp_path / "base.yaml", {"asr": {"provider": "cpu"}})
    overlay = write(tmp_path / "o.yaml", {"extends": str(base)})
    env = {"KITT_STT__ASR__NUM_THREADS": "3", "KITT_STT__INTERIM__ENABLED": "false"}
    config = load_config(overlay, env=env).config
    assert config.asr.num_threads == 3
    assert config.interim.enabled is False
    assert config.asr.provider is Provider.CPU


def test_kitt_stt_config_selects_the_file(tmp_path: Path) -> None:
    path = write(tmp_path / "c.yaml", {"turn": {"wait_ms": 1234}})
    assert load_config(env={"KITT_STT_CONFIG": str(path)}).config.turn.wait_ms == 1234


def test_unknown_key_names_file_and_key(tmp_path: Path) -> None:
    base = write(tmp_path / "base.yaml", {"vad": {"silence_ms": 500}})
    overlay = write(tmp_path / "o.yaml", {"extends": "base.yaml", "vad": {"silense_ms": 400}})
    with pytest.raises(ConfigError) as error:
        load_config(overlay, env={})
    message = str(error.value)
    assert "vad.silense_ms" in message and "unknown key" in message
    assert str(overlay.resolve()) in message and str(base.resolve()) not in message


def test_wrong_type_names_the_file_that_set_it(tmp_path: Path) -> None:
    base = write(tmp_path / "base.yaml", {"server": {"port": "eighty"}})
    overlay = write(tmp_path / "o.yaml", {"extends": "base.yaml"})
    with pytest.raises(ConfigError) as error:
        load_config(overlay, env={})
    assert "server.port" in str(error.value) and str(base.resolve()) in str(error.value)


def test_env_override_errors_name_the_variable() -> None:
    with pytest.raises(ConfigError, match="KITT_STT__ASR__PROVIDER"):
        load_config(env={"KITT_STT__ASR__PROVIDER": "tpu"})


def test_extends_cycle_and_missing_base(tmp_path: Path) -> None:
    write(tmp_path / "a.yaml", {"extends": "b.yaml"})
    write(tmp_path / "b.yaml", {"extends": "a.yaml"})
    with pytest.raises(ConfigError, match="cycle"):
        load_config(tmp_path / "a.yaml", env={})
    write(tmp_path / "c.yaml", {"extends": "nowhere.yaml"})
    with pytest.raises(ConfigError, match=r"nowhere\.yaml"):
        load_config(tmp_path / "c.yaml", env={})


def test_invalid_yaml_and_bad_hotword(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(write(tmp_path / "bad.yaml", "server: [unclosed"), env={})
    with pytest.raises(ConfigError, match=r"asr\.hotwords"):
        load_config(write(tmp_path / "hw.yaml", {"asr": {"hotwords": ["word:zero"]}}), env={})


@pytest.mark.parametrize(("name", "model"), [("config.yaml", "whisper-base"),
                                             ("config-k8s.yaml", "/models/sensevoice"),
                                             ("config-k3s-orin.yaml", "/models/sensevoice")])
def test_shipped_configs_are_valid(name: str, model: str) -> None:
    """Valid, and the embedded default runs whisper-base while the deployments run SenseVoice."""
    assert load_config(REPO / name, env={}).config.asr.model == model


def test_config_show_prints_the_merged_config() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "kitt_stt", "config", "show", "--config", str(REPO / "config-k8s.yaml")],
        capture_output=True, text=True, check=True,
    )
    shown = yaml.safe_load(result.stdout)
    expected = load_config(REPO / "config-k8s.yaml", env={}).config.model_dump(mode="json")
    assert shown == expected
    assert "config.yaml" in result.stdout.splitlines()[0]


def test_config_show_rejects_unknown_key(tmp_path: Path) -> None:
    path = write(tmp_path / "x.yaml", {"asr": {"modle": "tone"}})
    result = subprocess.run([sys.executable, "-m", "kitt_stt", "config", "show", "--config", str(path)],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "asr.modle" in result.stderr and str(path.resolve()) in result.stderr


@pytest.mark.parametrize("raw", ["123456", "null", "0x1F", "true"])
def test_tokens_from_the_environment_are_raw_text(raw: str) -> None:
    config = load_config(env={"KITT_STT__SERVER__AUTH_TOKEN": raw, "KITT_STT__DEBUG__TOKEN": raw}).config
    assert config.server.auth_token == raw and config.debug.token == raw


@pytest.mark.parametrize("written", ["123456", "0123", "0x1F", "12:30"])
def test_an_unquoted_token_that_yaml_reads_as_a_number_is_refused(tmp_path: Path, written: str) -> None:
    path = write(tmp_path / "c.yaml", f"server:\n  auth_token: {written}\n")
    with pytest.raises(ConfigError, match="quoted string"):
        load_config(path, env={})
    quoted = write(tmp_path / "q.yaml", f'server:\n  auth_token: "{written}"\n')
    assert load_config(quoted, env={}).config.server.auth_token == written


@pytest.mark.parametrize("raw", ["", "   "])
def test_an_empty_token_is_a_start_up_error_not_auth_off(raw: str) -> None:
    with pytest.raises(ConfigError, match="empty auth token"):
        load_config(env={"KITT_STT__SERVER__AUTH_TOKEN": raw})


def test_metrics_auth_needs_a_token() -> None:
    with pytest.raises(ConfigError, match=r"metrics_auth needs server\.auth_token"):
        load_config(env={"KITT_STT__SERVER__METRICS_AUTH": "true"})


def test_the_default_language_must_be_allowed() -> None:
    with pytest.raises(ConfigError, match=r"must be one of asr\.languages"):
        load_config(env={"KITT_STT__ASR__LANGUAGE": "de"})
