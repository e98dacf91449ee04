"""Ingest rows against the schema they are written to: names, types and the values behind them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from vigil.analyzer.ingest.processors import process
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.clickhouse.client import connect
from vigil.contract import Event, StepTiming, validate_event
from vigil.contract.registry import SPECS

EXAMPLES: list[Event] = [validate_event(s.kind, {**s.example, "event_id": f"example-{s.kind}-v{s.version}"}, s.version)
                         for s in SPECS]  # the registry's examples share one event_id
SCALARS = (str, int, float, bool, datetime, type(None))


def sources(event: Event, table: str, index: int) -> list[Any]:
    """The objects a row's like-named columns must agree with: the event, or the item it was made from."""
    if table == "gpu_stats":
        gpu = event.gpus[index - 1]  # type: ignore[attr-defined]
        return [gpu, {"gpu": gpu.index}, event]
    if table == "job_ranks":
        placement = event.ranks[index - 1]  # type: ignore[attr-defined]
        return [placement, placement.coords, {"ts": event.ts, "job_id": event.job_id}]
    if table == "job_phase_kinds":
        phase, kind = list(event.phase_kinds.items())[index - 1 - len(event.ranks)]  # type: ignore[attr-defined]
        return [{"phase": phase, "phase_kind": kind, "source": "job"}, event]
    return [event, getattr(event, "coords", None)]


def expected(objs: list[Any], column: str) -> tuple[bool, Any]:
    for obj in objs:
        if isinstance(obj, dict) and column in obj:
            return True, obj[column]
        if obj is not None and not isinstance(obj, dict) and column in type(obj).model_fields:
            value = getattr(obj, column)
            return isinstance(value, SCALARS), value
    return False, None


@pytest.mark.pure
def test_like_named_columns_carry_their_own_field() -> None:
    """A row column named like a field of its event holds that field (a swapped tx/rx fails here)."""
    compared: dict[str, int] = {}
    for event in EXAMPLES:
        for i, (table, row) in enumerate(process(event)):
            for column, value in row.items():
                known, want = expected(sources(event, table, i), column)
                if not known:
                    continue
                assert value == want or (want is None and value == ""), f"{table}.{column}: {value!r} != {want!r}"
                compared[table] = compared.get(table, 0) + 1
    assert set(compared) >= {"step_timings", "heartbeats", "gpu_stats", "nic_counters", "log_lines",
                             "process_exits", "collective_traces", "jobs", "job_ranks", "alert_events", "checkpoints",
                             "recovery_actions", "recovery_outcomes", "recovery_members", "advice_events"}
    assert min(compared.values()) >= 4


@pytest.mark.clickhouse
def test_rows_match_the_migrated_schema_and_insert(clickhouse_dsn: str, database: str) -> None:
    client = connect(clickhouse_dsn, database=database)
    for event in EXAMPLES:
        for table, row in process(event):
            described = client.query(f"DESCRIBE TABLE {table}").result_rows
            columns = {str(r[0]): str(r[2]) for r in described}  # name -> default kind ('' when none)
            assert set(row) <= set(columns), f"{table}: {sorted(set(row) - set(columns))} not in the table"
            missing = {c for c, default in columns.items() if not default} - set(row)
            assert not missing, f"{table}: rows leave out {sorted(missing)}, which have no default"
    writer = ClickHouseWriter(client=client)
    assert writer.write(EXAMPLES) == []
    for table in ("step_timings", "nic_counters", "gpu_stats", "job_ranks", "alert_events", "recovery_actions",
                  "recovery_outcomes", "recovery_members", "advice_events"):
        assert int(client.query(f"SELECT count() FROM {table}").result_rows[0][0]) >= 1, table
    step = next(e for e in EXAMPLES if isinstance(e, StepTiming))
    stored = client.query("SELECT phases, phase_kinds FROM step_timings").result_rows[0]
    assert stored == (step.phases, step.phase_kinds) and step.phases and step.phase_kinds  # through their inputs (0195)
    assert client.query("SELECT sum(n) FROM phase_host_windows").result_rows[0][0] == len(step.phases)
    tx, rx = client.query("SELECT tx_bytes, rx_bytes FROM nic_counters").result_rows[0]
    assert (tx, rx) == (9_800_000_000, 9_700_000_000)
    repl = client.query("SELECT repl_buddy, repl_pushed, repl_pushed_bytes, repl_refused, repl_last_step "
                        "FROM recovery_members").result_rows[0]
    assert repl == ("node-0001", 20, 20 << 30, {"host_full": 1}, 1210)  # an agent's replication counters
