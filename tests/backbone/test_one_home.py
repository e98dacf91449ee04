"""Facts with one home: each is defined once and every restatement (SQL, other components) is derived from it."""

from __future__ import annotations

import itertools
import re
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from vigil.analyzer.alerts.view import fold
from vigil.analyzer.ingest.processors import KINDS, NOT_STORED, RECENT
from vigil.analyzer.schema import ROLLUP_WINDOW_STEPS
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import Alert
from vigil.contract.hotkinds import HOT_KINDS, HOT_PREFIXES
from vigil.contract.latest import SQL_ORDER, order_key, supersedes
from vigil.contract.registry import LATEST
from vigil.contract.severity import SEVERITIES, of_rank, rank, sql_rank, worst
from vigil.contract.wire import COLUMNAR
from vigil.dashboard.queries.heatmap import ROLLUP_STEPS
from vigil.notify.state import NotifyState

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


def _alert(event_id: str, status: str, second: int) -> Alert:
    at = datetime(2026, 12, 7, 12, 0, second, tzinfo=UTC)
    return Alert(event_id=event_id, ts=at, job_id="j", host="h1", fingerprint="fp", alert="straggler",
                 subject="h1/step", status=status, severity="warning", summary=f"{status} {event_id}",  # type: ignore[arg-type]
                 first_seen=at, last_seen=at)


# a firing and a resolved event at the same time, a later firing, and two events tied on time and state
TIES = [_alert("e-aaaaaaa1", "firing", 1), _alert("e-aaaaaaa2", "resolved", 1),
        _alert("e-aaaaaaa3", "firing", 0), _alert("e-bbbbbbb1", "firing", 2), _alert("e-bbbbbbb0", "firing", 2)]


def _notifier_latest(events: list[Alert]) -> str:
    state = NotifyState()
    for e in events:
        state.apply(e)
    return state.alerts["fp"].event_id


@pytest.mark.pure
@pytest.mark.parametrize("upto", [3, 5])
def test_vigil_alerts_and_the_notifier_agree_in_every_arrival_order(upto: int) -> None:
    events = TIES[:upto]
    expected = max(events, key=order_key).event_id  # resolved beats firing at 12:00:01; e-bbbbbbb1 beats ...b0
    for order in itertools.permutations(events):
        assert fold(order)["fp"].event_id == expected
        assert _notifier_latest(list(order)) == expected
        assert not supersedes(order[0], order[0])  # a duplicate changes nothing


@pytest.mark.clickhouse
def test_the_current_views_take_the_same_latest_event(clickhouse_dsn: str) -> None:
    client = connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}")
    migrate_all(client, 30)
    for upto in (3, 5):
        client.command("TRUNCATE TABLE alert_events")
        cols = ["event_id", "ts", "job_id", "host", "fingerprint", "alert", "subject", "status", "severity",
                "summary", "first_seen", "last_seen", "evidence"]
        client.insert("alert_events", [[a.event_id, a.ts, a.job_id, a.host, a.fingerprint, a.alert, a.subject,
                                        a.status, a.severity, a.summary, a.first_seen, a.last_seen, "{}"]
                                       for a in reversed(TIES[:upto])], column_names=cols)
        (summary,), = client.query("SELECT summary FROM alerts_current WHERE fingerprint = 'fp'").result_rows
        assert summary == fold(TIES[:upto])["fp"].summary


@pytest.mark.pure
def test_the_views_migration_states_the_rule_as_written_in_python() -> None:
    migrations = sorted((ROOT / "analyzer" / "migrations").glob("*.sql"), key=lambda p: int(p.name[:4]))
    for view, table in (("alerts_current", "alert_events"), ("incidents_current", "incident_events")):
        last = [p for p in migrations if re.search(rf"CREATE (OR REPLACE )?VIEW (IF NOT EXISTS )?{view}\b",
                                                   p.read_text(encoding="utf-8"))][-1]
        assert f"{SQL_ORDER} AS k FROM {table}" in last.read_text(encoding="utf-8"), f"{last.name} defines {view}"


@pytest.mark.pure
def test_every_rollup_migration_and_reader_uses_the_schema_window() -> None:
    windows = {int(n) for p in sorted((ROOT / "analyzer" / "migrations").glob("*.sql"))
               for n in re.findall(r"intDiv\(step,\s*(\d+)\)", p.read_text(encoding="utf-8"))}
    assert windows == {ROLLUP_WINDOW_STEPS}, f"migrations window steps by {windows}, the schema says {ROLLUP_WINDOW_STEPS}"
    assert ROLLUP_STEPS == ROLLUP_WINDOW_STEPS  # the dashboard's declaration of the table it reads


@pytest.mark.pure
def test_every_kind_is_stored_by_the_analyzer_or_says_why_not() -> None:
    stored, not_stored = set(KINDS), set(NOT_STORED)
    assert not stored & not_stored
    assert stored | not_stored == set(LATEST), f"say whether the analyzer stores {set(LATEST) - stored - not_stored}"
    assert all(len(why) > 20 for why in NOT_STORED.values())


@pytest.mark.pure
def test_hot_kinds_have_one_home() -> None:
    assert frozenset(HOT_KINDS) == RECENT and set(HOT_PREFIXES) == set(HOT_KINDS)
    assert set(HOT_KINDS) >= COLUMNAR
