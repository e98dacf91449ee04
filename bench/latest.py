"""bench/LATEST.md: each benchmark's latest figures, generated from the journal bench/RESULTS.md.

RESULTS.md is the journal: every run appends a section `## <title> — <YYYY-MM-DD HH:MM> UTC`. This page keeps one
entry per benchmark (sections grouped by the script their title names, else by the title): when it last ran, how
many runs the journal holds, and the first table of its latest section. READMEs cite this page for "the latest
figure"; tests/backbone/test_bench_latest.py fails when it is older than the journal
(`python bench/latest.py` rewrites it).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS, LATEST = HERE / "RESULTS.md", HERE / "LATEST.md"
_HEAD = re.compile(r"^## (?P<title>.+?) — (?P<when>\d{4}-\d\d-\d\d \d\d:\d\d) UTC\s*$")
_SCRIPT = re.compile(r"\b([a-z_]+\.py)\b")
MAX_ROWS = 14


@dataclass
class Section:
    title: str
    when: str
    body: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        m = _SCRIPT.search(self.title)
        return m.group(1) if m else self.title

    def first_table(self) -> list[str]:
        rows: list[str] = []
        for line in self.body:
            if line.startswith("|"):
                rows.append(line.rstrip())
            elif rows:
                break
        return rows[:MAX_ROWS] + ([f"| … {len(rows) - MAX_ROWS} more rows in the journal |"] if len(rows) > MAX_ROWS else [])


def sections(journal: str) -> list[Section]:
    out: list[Section] = []
    for line in journal.splitlines():
        m = _HEAD.match(line)
        if m:
            out.append(Section(m.group("title"), m.group("when")))
        elif out:
            out[-1].body.append(line)
    return out


def render(journal: str) -> str:
    latest: dict[str, Section] = {}
    runs: dict[str, int] = {}
    for s in sections(journal):
        runs[s.key] = runs.get(s.key, 0) + 1
        if s.key not in latest or s.when >= latest[s.key].when:
            latest[s.key] = s
    ordered = sorted(latest.values(), key=lambda s: s.when, reverse=True)
    out = ["# Latest benchmark figures", "",
           "Generated from the journal [RESULTS.md](RESULTS.md) by `python bench/latest.py`; do not edit by hand.",
           "One entry per benchmark, newest first: its latest run's first table (the journal has the rest).", "",
           "| benchmark | latest run (UTC) | runs |", "|---|---|---|",
           *[f"| {s.key} | {s.when} | {runs[s.key]} |" for s in ordered], ""]
    for s in ordered:
        table = s.first_table()
        out += [f"## {s.title} — {s.when} UTC", "", *(table or ["(no table in this run's section)"]), ""]
    return "\n".join(out)


def main() -> int:
    LATEST.write_text(render(RESULTS.read_text(encoding="utf-8")), encoding="utf-8")
    print(f"wrote {LATEST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
