"""Hot kinds built as columns are exactly the processors' rows; JSONColumns stores exactly those values."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest

from tests.support.crafted import steps
from tests.support.wire_records import columnar_records, records
from vigil.analyzer.ingest.blocks import BlockInserter, columns
from vigil.analyzer.ingest.columns import BUILDERS, FROM_COLUMNS
from vigil.analyzer.ingest.processors import KINDS, process
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.clickhouse.client import connect
from vigil.contract import ParallelCoords, StepTiming, decode_batch
from vigil.contract.colwire import decode_columnar, events_of, is_columnar
from vigil.contract.fastwire import decode_fast


@pytest.mark.pure
@pytest.mark.parametrize("kind", sorted(BUILDERS))
def test_columns_are_the_processors_rows_column_by_column(kind: str) -> None:
    table, build = BUILDERS[kind]
    fast: list[Any] = []
    slow: list[Any] = []
    for value in records(kind):
        fast += decode_fast(value).events
        slow += decode_batch(value).events
    assert len(fast) >= 4
    for events in (fast, slow):
        rows = [row for e in events for t, row in process(e)]
        assert {t for e in events for t, _ in process(e)} == {table}, "a builder makes its kind's only table"
        want, got = columns(rows), build(events)
        assert list(got) == list(want), "the same columns, in the same order"
        for name in want:
            assert got[name] == want[name], name
    assert kind in KINDS


@pytest.mark.clickhouse
def test_stored_values_are_the_rows_values(clickhouse_dsn: str, database: str) -> None:
    """Through JSONColumns: milliseconds cut (not rounded), UInt64 to its top, floats exact, maps, NULLs."""
    client = connect(clickhouse_dsn, database=database)
    ts = datetime.now(UTC).replace(microsecond=123_999) - timedelta(hours=1)
    [base] = steps("values", 1, 1, gpus=1, start=ts - timedelta(seconds=1))
    events = [base.model_copy(update={"event_id": uuid.uuid4().hex, "step": 2**64 - 1, "tokens": 2**64 - 1,
                                      "step_ms": 0.1 + 0.2, "mfu": None, "phases": {"fwd ü\"x": 1e-300},
                                      "coords": ParallelCoords(dp=2**32 - 1), "failed": True,
                                      "loss": -1.5, "grad_norm": 1e300, "nonfinite": 2**32 - 1, "update_ratio": 1e-9,
                                      "digest": -(2**63)}),
              StepTiming(job_id="values", host="h-2", rank=1, world_size=2, step=0, step_ms=0.0, ts=ts)]
    writer = ClickHouseWriter(client=client)
    assert writer.write(events) == []
    got = client.query("SELECT event_id, step, tokens, step_ms, mfu, phases, dp, failed, ts, phase_kinds "
                       "FROM step_timings WHERE job_id = 'values' ORDER BY step DESC").result_rows
    assert [r[:8] for r in got] == [
        (events[0].event_id, 2**64 - 1, 2**64 - 1, 0.1 + 0.2, None, {"fwd ü\"x": 1e-300}, 2**32 - 1, 1),
        (events[1].event_id, 0, None, 0.0, None, {}, 0, 0)]
    health = client.query("SELECT loss, grad_norm, nonfinite, update_ratio, digest FROM step_timings WHERE job_id = 'values' "
                          "ORDER BY step DESC").result_rows
    assert health == [(-1.5, 1e300, 2**32 - 1, 1e-9, -(2**63)), (None, None, None, None, None)]
    for row in got:
        assert row[8].replace(tzinfo=UTC) == ts.replace(microsecond=123_000) and row[9] == {}


@pytest.mark.clickhouse
def test_a_value_the_engine_cannot_parse_fails_as_a_data_error(clickhouse_dsn: str, database: str) -> None:
    from vigil.clickhouse.failures import is_data_error

    client = connect(clickhouse_dsn, database=database)
    inserter = BlockInserter(client)
    for table, cols, why in [
        ("nic_counters", {"event_id": ["x", "y"], "port": [1, 2**40]}, "nic_counters.port: 1099511627776 is out"),
        ("step_timings", {"event_id": ["x"], "tokens": [None], "step": [-1]}, "step_timings.step: -1 is out"),
        ("step_timings", {"event_id": ["x", "y"], "tokens": [None, 2**64]}, "step_timings.tokens: 18446744073709551616"),
        ("step_timings", {"event_id": ["x"], "step_ms": ["fast"]}, "Code: 27"),  # the engine's parse error
    ]:
        with pytest.raises(Exception) as caught:
            inserter.insert(table, cols, None)
        assert is_data_error(caught.value) and why in str(caught.value), caught.value
    assert int(client.query("SELECT count() FROM step_timings").result_rows[0][0]) == 0


@pytest.mark.clickhouse
def test_every_kind_the_analyzer_stores_goes_in_through_json_columns(clickhouse_dsn: str, database: str) -> None:
    """Each kind's registry example (alerts, incidents, traces, recovery...): every table it makes gets its rows."""
    from vigil.contract import spec_for, validate_event

    client = connect(clickhouse_dsn, database=database)
    events = [validate_event(kind, {**spec_for(kind).example, "ts": datetime.now(UTC) - timedelta(minutes=5),
                                    "event_id": uuid.uuid4().hex}) for kind in sorted(KINDS)]
    want: dict[str, int] = {}
    for e in events:
        for table, _ in process(e):
            want[table] = want.get(table, 0) + 1
    assert ClickHouseWriter(client=client).write(events) == []
    got = {t: int(client.query(f"SELECT count() FROM {t}").result_rows[0][0]) for t in want}
    fed = got.pop("job_phase_kinds") - want.pop("job_phase_kinds")  # a view adds the kinds steps declare
    assert got == want and len(want) >= 14 and fed >= 0


@pytest.mark.pure
@pytest.mark.parametrize("kind", sorted(FROM_COLUMNS))
def test_a_columnar_record_makes_the_columns_its_events_make(kind: str) -> None:
    # the offload builds a table's columns from a columnar record's event columns with no object per event: the very
    # columns the builder makes of the same events one by one
    taken = 0
    for value in columnar_records(kind):
        cols = decode_columnar(value, kind) if is_columnar(value) else None
        if cols is None:
            continue
        taken += 1
        events = decode_fast(value).events
        assert FROM_COLUMNS[kind][1](cols) == BUILDERS[kind][1](events) == columns(
            [row for e in events for _t, row in process(e)])
        assert [msgspec.to_builtins(e) for e in events_of(kind, cols)] == [msgspec.to_builtins(e) for e in events]
    assert taken >= 4
