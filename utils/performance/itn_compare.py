"""Compare inverse-text-normalisation libraries on the project's fixtures: accuracy, weight, speed.

Each candidate runs in a fresh process (so its cold load is measured from the import), on every
fixture of ``tests/fixtures/text/itn_cases.tsv`` in the languages it supports; the table gives
fixtures right (any accepted output, exactly), ``keep`` fixtures it changed (text that must not
change: 一点都不好, "no one"), installed size of the package and everything it pulls in, cold load
(import, construction, first sentence) and the warm cost per sentence (mean over the fixtures, best
of ``--repeats`` passes).  ``kitt`` is the text
stage's own ITN step (wetext plus the speaker's unit words, ``kitt_stt/text/itn.py``); it runs in
this interpreter.  The other candidates are evaluation-only and are installed by this tool into
a throwaway virtual environment (``--venv``; NeMo, 1 GB and ten minutes of grammar building, only
with ``--with-nemo``, into its own)::

    python utils/performance/itn_compare.py
    python utils/performance/itn_compare.py --with-nemo --venv /tmp/itn-venv --nemo-venv /tmp/nemo-venv

Results are in ``docs/text.md``.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CASES = REPO / "tests/fixtures/text/itn_cases.tsv"
Normalize = Callable[[str, str], str]  # (lang, text) -> text

#: candidate -> (packages pip installs for it, the distribution whose closure is its install size)
CANDIDATES: dict[str, tuple[tuple[str, ...], str]] = {
    "kitt": ((), "wetext"),
    "wetext": (("wetext==0.1.8",), "wetext"),
    "wetextprocessing": (("wetextprocessing==1.2.0",), "wetextprocessing"),
    "cn2an": (("cn2an==0.5.24",), "cn2an"),
    "text2num": (("text2num==3.1.0",), "text2num"),
    "nemo": (("nemo-text-processing==1.2.0",), "nemo-text-processing"),
}


def load_cases(path: Path = CASES) -> list[tuple[str, str, str, tuple[str, ...]]]:
    """(lang, kind, spoken, accepted outputs) per fixture."""
    cases = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            lang, kind, spoken, accepted = line.split("\t")
            cases.append((lang, kind, spoken, tuple(accepted.split("|"))))
    return cases


# ----- inside the measuring process: one candidate, its imports only -----


def build(name: str, cache: Path) -> dict[str, Normalize]:
    """The candidate's normaliser per language it supports."""
    if name == "kitt":
        sys.path.insert(0, str(REPO))
        from kitt_stt.text.itn import WetextNormalizer
        from kitt_stt.text.language import TextLanguage

        kitt = WetextNormalizer()
        return {lang: lambda lang, text: kitt.normalize(text, TextLanguage(lang)) for lang in ("zh", "en")}
    if name == "wetext":
        from wetext import Normalizer

        wetext = {lang: Normalizer(lang=lang, operator="itn") for lang in ("zh", "en")}
        return {lang: lambda lang, text: wetext[lang].normalize(text) for lang in wetext}
    if name == "wetextprocessing":
        from itn.chinese.inverse_normalizer import InverseNormalizer as Chinese
        from itn.english.inverse_normalizer import InverseNormalizer as English

        # the Mandarin grammar ships compiled; the English one is compiled here on first use
        wetp = {"zh": Chinese(), "en": English(cache_dir=str(cache))}
        return {lang: lambda lang, text: wetp[lang].normalize(text) for lang in wetp}
    if name == "cn2an":
        import warnings

        import cn2an

        warnings.simplefilter("ignore")  # it warns for every numeral-looking word it cannot read
        return {"zh": lambda _, text: cn2an.transform(text, "cn2an")}
    if name == "text2num":
        from text_to_num import alpha2digit

        return {"en": lambda _, text: alpha2digit(text, "en")}
    if name == "nemo":
        from nemo_text_processing.inverse_text_normalization.inverse_normalize import InverseNormalizer

        nemo = {lang: InverseNormalizer(lang=lang, cache_dir=str(cache)) for lang in ("zh", "en")}
        return {lang: lambda lang, text: nemo[lang].inverse_normalize(text, verbose=False) for lang in nemo}
    raise SystemExit(f"unknown candidate {name!r}")


def installed_mb(distribution: str) -> float:
    """Size on disk of ``distribution`` and every distribution it requires (extras left out)."""
    seen: set[str] = set()
    pending, total = [distribution], 0
    while pending:
        name = re.sub(r"[-_.]+", "-", pending.pop()).lower()
        if name in seen:
            continue
        seen.add(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        total += sum(path.stat().st_size for path in (file.locate() for file in dist.files or ()) if path.is_file())
        for requirement in dist.requires or ():
            if "extra ==" not in requirement:
                pending.append(re.split(r"[\s;<>=!~\[(]", requirement, maxsplit=1)[0])
    return total / 1e6


def measure(name: str, cache: Path, repeats: int) -> dict[str, object]:
    cases = load_cases()
    start = time.perf_counter()
    normalizers = build(name, cache)
    first = next(case for case in cases if case[0] in normalizers)
    normalizers[first[0]](first[0], first[2])
    cold_s = time.perf_counter() - start
    outputs = {spoken: normalizers[lang](lang, spoken).strip() for lang, _, spoken, _ in cases if lang in normalizers}
    warm_us: dict[str, float] = {}
    for lang in normalizers:
        texts = [spoken for case_lang, _, spoken, _ in cases if case_lang == lang]
        passes = []
        for _ in range(repeats):  # the best pass: other load on the machine only ever adds
            start = time.perf_counter()
            for text in texts:
                normalizers[lang](lang, text)
            passes.append((time.perf_counter() - start) / len(texts) * 1e6)
        warm_us[lang] = min(passes)
    return {"outputs": outputs, "cold_s": cold_s, "warm_us": warm_us, "mb": installed_mb(CANDIDATES[name][1])}


# ----- the comparison: environments, processes, table -----


def ensure_venv(venv: Path, packages: tuple[str, ...]) -> Path:
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", *packages], check=True)
    return python


def run_candidate(python: Path, name: str, repeats: int, cache: Path | None = None) -> dict[str, object]:
    """Measure ``name`` in a fresh process; grammars it compiles go to ``cache`` (default: a
    temporary directory, so compiling counts in its cold load)."""
    with tempfile.TemporaryDirectory() as temporary:
        command = [str(python), __file__, "--measure", name, "--cache", str(cache or temporary),
                   "--repeats", str(repeats)]
        result = subprocess.run(command, capture_output=True, text=True, check=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def table(results: dict[str, dict[str, object]]) -> list[str]:
    cases = load_cases()
    totals = {lang: sum(case[0] == lang for case in cases) for lang in ("zh", "en")}
    keeps = {lang: sum(case[0] == lang and case[1] == "keep" for case in cases) for lang in ("zh", "en")}
    rows = [f"| candidate | zh right (of {totals['zh']}) | zh keep changed (of {keeps['zh']}) "
            f"| en right (of {totals['en']}) | en keep changed (of {keeps['en']}) | installed MB | cold load s "
            "| warm µs/sentence zh | warm µs/sentence en |", "|---|---|---|---|---|---|---|---|---|"]
    for name, result in results.items():
        outputs: dict[str, str] = result["outputs"]  # type: ignore[assignment]
        warm: dict[str, float] = result["warm_us"]  # type: ignore[assignment]
        cells = []
        for lang in ("zh", "en"):
            mine = [case for case in cases if case[0] == lang and case[2] in outputs]
            if not mine:
                cells += ["—", "—"]
                continue
            right = sum(outputs[spoken] in accepted for _, _, spoken, accepted in mine)
            changed = sum(outputs[spoken] != spoken for _, kind, spoken, _ in mine if kind == "keep")
            cells += [str(right), str(changed)]
        speed = [f"{warm[lang]:.0f}" if lang in warm else "—" for lang in ("zh", "en")]
        rows.append(f"| {name} | {' | '.join(cells)} | {result['mb']:.1f} | {result['cold_s']:.2f} "
                    f"| {' | '.join(speed)} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", type=Path, default=Path(tempfile.gettempdir()) / "kitt-itn-venv")
    parser.add_argument("--with-nemo", action="store_true")
    parser.add_argument("--nemo-venv", type=Path, default=Path(tempfile.gettempdir()) / "kitt-nemo-venv")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--failures", action="store_true", help="list each candidate's wrong outputs")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--cache", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.measure:
        print(json.dumps(measure(args.measure, args.cache, args.repeats), ensure_ascii=False))
        return 0
    others = [name for name in CANDIDATES if name not in ("kitt", "nemo")]
    python = ensure_venv(args.venv, tuple(package for name in others for package in CANDIDATES[name][0]))
    results = {"kitt": run_candidate(Path(sys.executable), "kitt", args.repeats)}
    results |= {name: run_candidate(python, name, args.repeats) for name in others}
    if args.with_nemo:
        nemo_python = ensure_venv(args.nemo_venv, CANDIDATES["nemo"][0])
        # its grammars take ~10 minutes to compile; kept beside its environment for later runs
        results["nemo"] = run_candidate(nemo_python, "nemo", 1, args.nemo_venv / "grammars")
    print("\n".join(table(results)))
    if args.failures:
        for name, result in results.items():
            outputs: dict[str, str] = result["outputs"]  # type: ignore[assignment]
            print(f"\n{name}:")
            for lang, _, spoken, accepted in load_cases():
                if spoken in outputs and outputs[spoken] not in accepted:
                    print(f"  {lang} {spoken} -> {outputs[spoken]}   (want {accepted[0]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
