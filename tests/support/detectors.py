"""The analyzer's detectors run over crafted events in a test database: load the events, run the detectors at
an instant, wait until the live clock caught up."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from vigil.analyzer.engine import LiveCursor, replay
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.contract import Alert, Event


def load(dsn: str, db: str, events: list[Event]) -> ClickHouseWriter:
    w = ClickHouseWriter(client=connect(dsn, database=db))
    for i in range(0, len(events), 50_000):
        w.write(events[i:i + 50_000])
    return w


def run(dsn: str, db: str, job: str, **overrides: object) -> list:  # type: ignore[type-arg]
    return replay(connect(dsn, database=db), AnalyzerSettings(**overrides), job)  # type: ignore[arg-type]


def caught_up(cursor: LiveCursor, client: Any, frontier: datetime | None = None,
              topics: dict[str, datetime] | None = None) -> list[Alert]:
    """Turns of the live cursor until nothing waits (each turn is bounded by its budget)."""
    out = cursor.turn(client, frontier=frontier, topics=topics)
    while cursor.backlog:
        out += cursor.turn(client, frontier=frontier, topics=topics)
    return out
