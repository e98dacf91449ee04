"""Jobs handed between detect shards mid-burst are judged at every instant once: live equals replay.

The dead shard is killed mid-burst: its last turns' alerts are on the topic, its positions never saved. The new
owner restores the book as of the saved positions (`AlertBook.restore(until=...)`) and judges those instants again:
the same events, none published twice (before: 7 re-published and a job's alerts no longer equal to replay)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.support.detectors import caught_up, load
from tests.support.live_cursor import key, simulated
from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.engine import LiveCursor, replay
from vigil.analyzer.positions import MemoryPositions
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.shard import Ownership, partition_of
from vigil.clickhouse.client import connect
from vigil.contract import Alert

pytestmark = [pytest.mark.clickhouse, pytest.mark.slow]

JOBS = ("handed-a", "handed-b")


def test_a_job_moved_to_another_shard_and_a_dead_shards_jobs_raise_each_alert_once(clickhouse_dsn: str,
                                                                                     database: str) -> None:
    pa, pb = (partition_of(j) for j in JOBS)
    assert pa != pb
    batches = {job: simulated(job, 100, seed=5 + i) for i, job in enumerate(JOBS)}
    client = connect(clickhouse_dsn, database=database)
    settings = AnalyzerSettings(max_catchup=7, turn_budget_s=0.2)
    store = MemoryPositions()  # detect_positions: shared by the shards
    owners = [Ownership(owned=[pa, pb]), Ownership(owned=[])]
    cursors = [LiveCursor(settings=settings, book=AlertBook(refresh_s=settings.refresh_s), store=store, owner=o)
               for o in owners]
    live: list[Alert] = []  # the alerts topic
    now = datetime.now(UTC)

    def turn(frontier: datetime) -> None:
        for cursor in cursors:
            live.extend(caught_up(cursor, client, frontier))
            cursor.commit()
        for job in JOBS:  # each job owned by exactly one shard at a time
            assert sum(o.owns(job) for o in owners) == 1

    def gain(k: int, unsaved: int = 0, frontier: datetime = now) -> None:  # the new owner restores its book
        cursors[k].book.restore((a for a in live if owners[k].owns(a.job_id)), until=store.load())  # from the topic
        judged = [c.instants_judged for c in cursors]
        turn(frontier)  # the new owner goes on from the saved positions: it judges again only what was never saved
        assert sum(c.instants_judged for c in cursors) - sum(judged) == unsaved

    for k, chunk in enumerate((slice(0, 35), slice(35, 70), slice(70, None))):
        load(clickhouse_dsn, database, [e for job in JOBS for b in batches[job][chunk] for e in b])
        if k == 2:  # the first shard is killed mid-burst: what it judged is published, its positions never saved
            later = datetime.now(UTC) + timedelta(seconds=settings.watermark_idle_s + 1)  # silent hosts let go
            live.extend(caught_up(cursors[1], client, later))  # the survivor judges its own job as usual
            cursors[1].commit()
            before, published = cursors[0].instants_judged, len(live)
            live.extend(caught_up(cursors[0], client, later))
            unsaved = cursors[0].instants_judged - before
            assert unsaved > 0 and len(live) > published  # its book (on the topic) is ahead of its saved position
            owners[0].revoke([pa])  # its session expires: its jobs move to the second
            cursors.pop(0)
            owners.pop(0)
            owners[0].assign([pa, pb])
            gain(0, unsaved, later)
            continue
        turn(now)
        if k == 0:  # the group grows: job b moves to the second shard
            owners[0].revoke([pb])
            owners[1].assign([pb])
            gain(1)
    turn(datetime.now(UTC) + timedelta(seconds=settings.watermark_idle_s + 1))
    assert len({a.event_id for a in live}) == len(live)  # none raised twice
    for job in JOBS:
        expected = replay(client, settings, job)
        assert {a.alert for a in expected} >= {"straggler", "heartbeat_loss", "process_exit"}
        assert key([a for a in live if a.job_id == job]) == key(expected)
