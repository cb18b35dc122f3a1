"""The text stage's evaluation tools: threshold sweep, ITN comparison, cost bench (their quick parts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from utils.performance import itn_compare, text_stage_bench, wake_thresholds


def test_wake_thresholds_prints_a_sweep_per_threshold_and_the_failures(capsys: pytest.CaptureFixture[str]) -> None:
    assert wake_thresholds.main(["--scores", "0.75", "0.9"]) == 0
    out = capsys.readouterr().out
    assert "| min_score_han | false wakes (of 24) | missed (of 26) | wrong strip |" in out
    assert "| 0.75 (default) | 0 | 0 | 1 |" in out  # min_score_han
    assert "| 0.90 (default) | 0 | 0 | 1 |" in out  # min_score_han_short
    assert "- false wake: `Hey Kim, how was work?` (near miss kim)" in out


def test_wake_cases_refuse_an_unknown_kind(tmp_path: Path) -> None:
    bad = tmp_path / "cases.tsv"
    bad.write_text("maybe\t小凯\t\tnote\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown kind 'maybe'"):
        wake_thresholds.load_cases(bad)


def test_itn_compare_measures_the_chosen_step_and_tabulates_it(tmp_path: Path) -> None:
    result = itn_compare.measure("kitt", tmp_path, repeats=1)
    assert len(result["outputs"]) == len(itn_compare.load_cases())
    assert result["mb"] > 5
    rows = itn_compare.table({"kitt": result})
    assert rows[0].startswith("| candidate | zh right (of 37) | zh keep changed (of 13) | en right (of 24) |")
    assert rows[2].startswith("| kitt | 31 | 0 | 23 | 0 |")


def test_itn_compare_marks_languages_a_candidate_lacks() -> None:
    result = {"outputs": {"调到二十六度": "调到26度"}, "cold_s": 0.1, "warm_us": {"zh": 30.0}, "mb": 1.0}
    row = itn_compare.table({"zh-only": result})[2]
    assert row == "| zh-only | 1 | 0 | — | — | 1.0 | 0.10 | 30 | — |"


def test_text_stage_bench_measures() -> None:
    stage = text_stage_bench.stage(text_stage_bench.USUAL)
    assert text_stage_bench.warm_us(stage, "interim", repeats=2) > 0
    assert all(len(phrase) == 32 for phrase in text_stage_bench.LARGEST)
    setup_ms, first_ms = text_stage_bench.cold_ms("interim", preload=False)
    assert setup_ms > 0 and first_ms > 0
