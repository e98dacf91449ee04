"""The false-alarm budgets: each detector states one, they add up to the fleet's, and the README says the same."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from vigil.analyzer.engine import DETECTORS

pytestmark = pytest.mark.pure
README = Path(__file__).resolve().parents[2] / "analyzer" / "README.md"


def test_every_detector_has_a_budget_and_they_add_up_to_one_per_healthy_job_hour() -> None:
    budgets = {d.name: d.false_alarms_per_hour for d in DETECTORS}
    assert all(b >= 0 for b in budgets.values()) and len(budgets) == len(DETECTORS)
    assert sum(budgets.values()) <= 1.0 + 1e-9


def test_the_readme_table_equals_the_detectors_budgets() -> None:
    text = README.read_text(encoding="utf-8")
    table = text.split("<!-- budgets:", 1)[1].split("<!-- /budgets -->", 1)[0]
    rows = dict(re.findall(r"^\| `(\w+)` \| ([0-9.]+) \|", table, flags=re.M))
    assert {k: float(v) for k, v in rows.items()} == {d.name: d.false_alarms_per_hour for d in DETECTORS}, \
        "analyzer/README.md's budget table is stale"
