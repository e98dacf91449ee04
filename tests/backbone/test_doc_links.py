"""Every relative link in the guides (README.md, each component's README.md) and the reference (docs/*.md) points at
a file that exists: moving a page or a section fails here, not in a reader's browser."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _pages() -> list[Path]:
    pages = [ROOT / "README.md", *sorted(ROOT.glob("*/README.md")), *sorted((ROOT / "docs").glob("*.md"))]
    return [p for p in pages if ".venv" not in p.parts]


@pytest.mark.pure
def test_relative_links_resolve() -> None:
    broken = []
    for page in _pages():
        text = re.sub(r"(?ms)^```.*?^```", "", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue
            path = target.split("#", 1)[0]
            if path and not (page.parent / path).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert not broken, broken


@pytest.mark.pure
def test_guides_stay_guides() -> None:
    assert len((ROOT / "README.md").read_bytes()) <= 16_000, "README.md is a guide: move reference to docs/"
    big = {p.parent.name: len(p.read_bytes()) for p in ROOT.glob("*/README.md") if len(p.read_bytes()) > 12_000}
    assert not big, f"a component's README is a guide (~10 KB): move its reference to docs/: {big}"
