"""Facts with one home: each is defined once and every restatement (SQL, other components) is derived from it."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest

from vigil.clickhouse.client import connect
from vigil.contract.severity import SEVERITIES, of_rank, rank, sql_rank, worst

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("vigil", "collector", "analyzer", "recovery", "dashboard", "notify", "timer", "data")


def _product_sources() -> list[Path]:
    seen: set[Path] = set()
    for top in PRODUCT:
        for path in (ROOT / top).rglob("*.py"):
            real = path.resolve()
            if real not in seen and ".venv" not in path.parts:
                seen.add(real)
    return sorted(seen)


@pytest.mark.pure
def test_severity_scale_is_ordered_and_total() -> None:
    assert SEVERITIES == ("info", "warning", "error", "critical")
    assert [rank(s) for s in SEVERITIES] == [0, 1, 2, 3] and rank("fatal") == -1
    assert of_rank(7) == "critical" and of_rank(-2) == "info"
    assert worst(["warning", "critical", "error"]) == "critical" and worst([]) == "info"
    assert worst(["nonsense"]) == "info"


@pytest.mark.pure
def test_no_component_restates_the_severity_scale() -> None:
    members = r"""['"](?:info|warning|error|critical)['"]"""
    item = rf"{members}\s*(?::\s*\d+\s*)?"
    listed = re.compile(rf"{item},\s*{item},\s*{item},\s*{members}")  # the whole scale, as a tuple or a rank map
    home = ROOT / "vigil" / "contract" / "severity.py"
    offenders = [str(p.relative_to(ROOT)) for p in _product_sources()
                 if p != home and listed.search(p.read_text(encoding="utf-8"))]
    assert not offenders, f"import the scale from vigil.contract.severity instead: {offenders}"


@pytest.mark.clickhouse
def test_sql_rank_is_python_rank(clickhouse_dsn: str) -> None:
    client = connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}")
    for value in (*SEVERITIES, "fatal", ""):
        (got,), = client.query(f"SELECT {sql_rank('{s:String}')}", parameters={"s": value}).result_rows
        assert got == rank(value), value
