"""The generated reference pages (docs/settings.md, docs/tables.md) are what the code generates now."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from vigil.app.reference import settings, tables
from vigil.clickhouse.client import connect

DOCS = Path(__file__).resolve().parents[2] / "docs"
HINT = "stale: run `python -m vigil.app.reference` and commit docs/"


@pytest.mark.pure
def test_settings_page_is_current() -> None:
    assert (DOCS / "settings.md").read_text(encoding="utf-8") == settings.page(), HINT


@pytest.mark.pure
def test_settings_page_shows_no_secret_and_no_machine_value() -> None:
    text = settings.page()
    assert "| `VIGIL_CLICKHOUSE_DSN` | SecretStr | None | (secret) |" in text.replace("\\|", "|")
    assert "socket.gethostname()" in text  # a default computed where it runs, not this machine's name


@pytest.mark.clickhouse
def test_tables_page_is_current(clickhouse_dsn: str) -> None:
    # the session's engine (one chdb engine per process), a database of its own
    text = tables.page(connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}"))
    assert "## `alert_events` (ReplacingMergeTree; analyzer)" in text and "; ?)" not in text
    assert (DOCS / "tables.md").read_text(encoding="utf-8") == text, HINT
