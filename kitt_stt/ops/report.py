"""``kitt-stt doctor``'s findings: rows for the table, the missing list that decides the exit
status, and the structured facts behind them for ``--json``."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from kitt_stt.str_enum import StrEnum


class Status(StrEnum):
    OK = "ok"
    INFO = "info"  # a fact, or something absent that this configuration does not need
    WARN = "warn"  # worth fixing; the service still starts
    FAIL = "FAIL"  # the configuration asks for it and this host lacks it


@dataclass(frozen=True)
class Row:
    section: str
    item: str
    status: Status
    detail: str


@dataclass
class Report:
    title: str
    rows: list[Row] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)  # one short name per thing the host lacks
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def add(self, section: str, item: str, status: Status, detail: str) -> None:
        self.rows.append(Row(section, item, status, detail))

    def fail(self, section: str, item: str, detail: str, missing: str) -> None:
        self.add(section, item, Status.FAIL, detail)
        if missing not in self.missing:
            self.missing.append(missing)

    def warn(self, section: str, item: str, detail: str) -> None:
        self.add(section, item, Status.WARN, detail)
        self.warnings.append(f"{item}: {detail}")

    @property
    def ok(self) -> bool:
        return not self.missing

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def verdict(self) -> str:
        if self.ok:
            extra = f" ({len(self.warnings)} warning{'s' if len(self.warnings) != 1 else ''})" if self.warnings else ""
            return f"OK: this host can run this configuration{extra}"
        return "FAILED: this host lacks what the configuration asks for: " + "; ".join(self.missing)


def render_table(report: Report) -> str:
    headers = ("section", "item", "status", "detail")
    cells = [(row.section, row.item, str(row.status), row.detail) for row in report.rows]
    widths = [max([len(header)] + [len(cell[index]) for cell in cells]) for index, header in enumerate(headers[:3])]
    lines = [report.title, ""]
    rule = (*("-" * width for width in widths), "-" * 6)
    for cell in [headers, rule, *cells]:
        columns = (text.ljust(width) for text, width in zip(cell[:3], widths, strict=True))
        lines.append("  ".join(columns) + "  " + cell[3])
    lines += ["", report.verdict()]
    return "\n".join(line.rstrip() for line in lines) + "\n"


def render_json(report: Report) -> str:
    data = {
        "ok": report.ok,
        "exit_code": report.exit_code,
        "title": report.title,
        "missing": report.missing,
        "warnings": report.warnings,
        "verdict": report.verdict(),
        "rows": [{**asdict(row), "status": str(row.status)} for row in report.rows],
        "facts": report.facts,
    }
    return json.dumps(data, indent=2, ensure_ascii=False, default=str) + "\n"
