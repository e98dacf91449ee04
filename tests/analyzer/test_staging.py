"""A batch staged ahead (`staging`) is written exactly as one the writer prepares itself."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.support.crafted import steps
from vigil.analyzer.ingest.writer import ClickHouseWriter
from vigil.app.components import migrate_all
from vigil.clickhouse.client import connect
from vigil.contract import Heartbeat, NicCounters
from vigil.contract.fastwire import decode_fast
from vigil.contract.wire import encode_batch
from vigil.kafka.consumer import BatchId, OffsetRange

pytestmark = pytest.mark.clickhouse


def batch_id(n: int) -> BatchId:
    return BatchId(ranges=(OffsetRange(topic="t", partition=0, first=n * 100, last=n * 100 + 99),))


def fast(events: list[Any]) -> list[Any]:
    """As the consumer hands them over: decoded by the fast path, one record per kind."""
    out: list[Any] = []
    for kind in ("step", "nic", "heartbeat"):
        if of_kind := [e for e in events if e.kind == kind]:
            out += decode_fast(encode_batch(of_kind)).events
    return out


def batches() -> tuple[list[Any], list[Any]]:
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=30)
    first = steps("stg", 3, 4, gpus=2, start=start)
    nic = [NicCounters(job_id="stg", host=f"h{i}", device="mlx5_0", link="rdma", tx_bytes=i, rx_bytes=i,
                       tx_bps=1e9, rx_bps=1e9, interval_s=1.0, ts=start + timedelta(seconds=i)) for i in range(3)]
    hb = [Heartbeat(job_id="stg", host="h0", ts=start + timedelta(seconds=2))]
    later = steps("stg", 3, 8, gpus=2, start=start)[len(first):]
    one = fast([*first, *nic, *hb])
    # the second: new steps, two of the first batch's (a producer re-send), one of its own twice, a new NIC sample
    nic2 = NicCounters(job_id="stg", host="h1", device="mlx5_0", link="rdma", tx_bytes=9, rx_bytes=9, tx_bps=1e9,
                       rx_bps=1e9, interval_s=1.0, ts=start + timedelta(seconds=9), event_id=uuid.uuid4().hex)
    two = fast([*later, nic2])
    return one, [*two, one[0], one[5], two[3]]


def stored(client: Any) -> dict[str, list[tuple[Any, ...]]]:
    return {t: client.query(f"SELECT event_id, count() FROM {t} GROUP BY event_id ORDER BY event_id").result_rows
            for t in ("step_timings", "nic_counters", "heartbeats", "gpu_stats")}


@pytest.mark.parametrize("stale", [False, True])
def test_a_staged_batch_is_written_as_one_prepared_by_the_writer(clickhouse_dsn: str, stale: bool) -> None:
    """The second batch holds re-sends of the first (the window drops them: the staged columns cannot be used as
    they are) and a repeat of its own; `stale`: events appended to the list after it was staged are written too."""
    results = []
    made = batches()
    for staging in (False, True):
        database = f"t_{uuid.uuid4().hex[:10]}"
        client = connect(clickhouse_dsn, database=database)
        migrate_all(client, 30)
        writer = ClickHouseWriter(client=client)
        one, two = list(made[0]), list(made[1])
        tail = two[-4:] if stale else []
        two = two[:-4] if stale else two
        for n, events in enumerate((one, two)):
            if staging:
                writer.stage(events)
            events += tail if n == 1 else []
            assert writer.write(events, batch_id(n)) == []
        results.append((stored(client), writer.rows_written, writer.skipped_duplicates, writer.looked_up))
    assert results[0] == results[1]
    rows = results[1][0]
    assert all(n == 1 for table in rows.values() for _, n in table)
    assert len(rows["step_timings"]) == 3 * 8 * 2 and len(rows["nic_counters"]) == 4 and len(rows["heartbeats"]) == 1
    assert results[1][2] == 3, "two re-sends and one repeat dropped"


def test_a_batch_without_hot_events_is_written(clickhouse_dsn: str, database: str) -> None:
    """A quiet second's batch: only a log line and an exit (no step, heartbeat or NIC sample), staged or not."""
    from vigil.contract import LogLine, ProcessExit

    client = connect(clickhouse_dsn, database=database)
    writer = ClickHouseWriter(client=client)
    quiet = [LogLine(job_id="stg", host="h0", category="nccl", severity="error", message="NCCL WARN x"),
             ProcessExit(job_id="stg", host="h0", pid=7, exit_code=1)]
    assert writer.write(quiet[:1], batch_id(0)) == []
    writer.stage(quiet[1:])
    assert writer.write(quiet[1:], batch_id(1)) == []
    assert client.query("SELECT count() FROM log_lines").result_rows[0][0] == 1
    assert client.query("SELECT count() FROM process_exits").result_rows[0][0] == 1


def test_the_marks_of_built_columns_are_the_marks_of_the_events() -> None:
    from vigil.analyzer.ingest.columns import BUILDERS
    from vigil.analyzer.ingest.recent import Marks

    one, _ = batches()
    for kind in ("step", "nic"):
        group = [e for e in one if e.kind == kind]
        assert Marks.of_columns(BUILDERS[kind][1](group)) == Marks.of(group), kind
