"""bench/LATEST.md (each benchmark's latest figures) is what bench/latest.py makes of the journal now."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _latest() -> object:
    spec = importlib.util.spec_from_file_location("bench_latest", BENCH / "latest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.pure
def test_latest_page_is_current() -> None:
    latest = _latest()
    text = latest.render((BENCH / "RESULTS.md").read_text(encoding="utf-8"))  # type: ignore[attr-defined]
    assert (BENCH / "LATEST.md").read_text(encoding="utf-8") == text, "stale: run `python bench/latest.py`"


@pytest.mark.pure
def test_the_latest_run_of_a_benchmark_wins() -> None:
    latest = _latest()
    journal = ("## scale.py — 2026-01-01 00:00 UTC\n\n| a |\n|---|\n| old |\n\n"
               "## Scale (bench/scale.py) — 2026-01-02 00:00 UTC\n\ntext\n\n| a |\n|---|\n| new |\n")
    page = latest.render(journal)  # type: ignore[attr-defined]
    assert "| scale.py | 2026-01-02 00:00 | 2 |" in page and "| new |" in page and "| old |" not in page
