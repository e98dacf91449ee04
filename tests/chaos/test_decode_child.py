"""The ingest's decode process killed under a live ingest: restarted, its batches decoded by the analyzer itself,
every event stored once (real broker, real engine, the real child)."""

from __future__ import annotations

import threading
import uuid

import pytest

from tests.support.crafted import heartbeats, nic, steps
from tests.support.waiting import wait_until
from vigil.analyzer.ingest.loop import IngestLoop
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse, pytest.mark.chaos]


def count(client: object, table: str) -> int:
    return int(client.query(f"SELECT count() FROM {table}").result_rows[0][0])  # type: ignore[attr-defined]


def test_a_killed_decode_process_loses_and_repeats_nothing(topics: VigilSettings, clickhouse_dsn: str,
                                                           database: str) -> None:
    client = connect(clickhouse_dsn, database=database)
    loop = IngestLoop(settings=topics, analyzer=AnalyzerSettings(batch_s=0.3, group_id=f"g-{database}",
                                                               decode_process=True),
                      bootstrap=str(topics.kafka_bootstrap), client=client,
                      producer=EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap)))
    assert loop.decoder is not None
    loop.decoder.restart_backoff_s = 0.0  # each kill is followed by the next round's batches at once
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap), batch_events=50)
    stop = threading.Event()
    worker = threading.Thread(target=loop.run, args=(stop,))
    worker.start()
    sent = 0
    try:
        for round_ in range(3):
            job = f"kill-{round_}-{uuid.uuid4().hex[:4]}"
            evs = [*steps(job, 6, 10), *nic(job, 6, 10), *heartbeats(job, 6, 10)]
            producer.send(evs)
            producer.send(evs[:40])  # a re-send: the window's fallback, with the child's events
            producer.flush()
            sent += len(evs) + 40
            wait_until(lambda n=sent: loop.stats.events >= n, 90, f"round {round_} ingested")
            child = loop.decoder.process
            assert child is not None
            child.kill()  # the next batch finds it dead: restarted
            child.wait(10)
        wait_until(lambda: loop.decoder is not None and loop.decoder.restarts >= 2, 60, "the child restarted")
        assert count(client, "step_timings") == 3 * 6 * 2 * 10
        assert count(client, "nic_counters") == 3 * 6 * 10
        assert count(client, "heartbeats") == 3 * 6 * 5
        assert int(client.query("SELECT sum(ranks) FROM job_steps").result_rows[0][0]) == 3 * 6 * 2 * 10
        assert loop.writer.offloaded_batches >= 1, "the child's columns were inserted as they were"
        assert not loop.failed
    finally:
        stop.set()
        worker.join(60)
    assert loop.decoder.pid is None, "the child is stopped with the ingest"
