"""Ingest through the real broker into real ClickHouse: idempotent, dead letters, never stops."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator

import pytest

from tests.support.crafted import heartbeats, nic, steps
from tests.support.waiting import wait_until
from vigil.analyzer.ingest.loop import IngestLoop
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.kafka.producer import EventProducer
from vigil.kafka.reader import read_topics
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka, pytest.mark.clickhouse]


@pytest.fixture(params=[False, True], ids=["decoded-here", "decode-process"])
def ingest(topics: VigilSettings, clickhouse_dsn: str, database: str, request: pytest.FixtureRequest) -> Iterator[IngestLoop]:
    client = connect(clickhouse_dsn, database=database)
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    loop = IngestLoop(settings=topics, analyzer=AnalyzerSettings(batch_s=0.3, group_id=f"g-{database}",
                                                                 decode_process=request.param),
                      bootstrap=str(topics.kafka_bootstrap), client=client, producer=producer)
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop,))
    t.start()
    yield loop
    stop.set()
    t.join(30)


def scalar(client: object, sql: str) -> int:
    return int(client.query(sql).result_rows[0][0])  # type: ignore[attr-defined]


def test_duplicates_and_redelivery_never_double_count(topics: VigilSettings, ingest: IngestLoop) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap), batch_events=100)
    evs = [*steps("dup", 8, 20), *heartbeats("dup", 8, 20), *nic("dup", 8, 20)]
    producer.send(evs)
    producer.send(list(reversed(evs[:200])))  # the same events again, out of order
    producer.flush()
    client = ingest.client
    wait_until(lambda: ingest.stats.events >= len(evs) + 200)
    producer.send(evs)  # a whole re-delivery
    producer.flush()
    wait_until(lambda: ingest.stats.events >= 2 * len(evs) + 200)
    assert scalar(client, "SELECT count() FROM step_timings") == 8 * 2 * 20
    assert scalar(client, "SELECT count() FROM heartbeats") == 8 * 10
    assert scalar(client, "SELECT count() FROM nic_counters") == 8 * 20
    assert scalar(client, "SELECT sum(n) FROM phase_host_windows WHERE phase = 'forward'") == 8 * 2 * 20
    assert scalar(client, "SELECT sum(ranks) FROM job_steps") == 8 * 2 * 20
    assert scalar(client, "SELECT sum(n) FROM nic_windows") == 8 * 20
    assert ingest.writer.skipped_duplicates == len(evs) + 200


CORPUS: list[tuple[bytes | None, str]] = [
    (b"\x00\xffnot json", "not JSON"),
    (b"[1, 2, 3]", "must be an object"),
    (b'{"kind": "step", "events": []}', "integer 'schema_version'"),
    (b'{"kind": "gossip", "schema_version": 1, "events": [{}]}', "unknown event kind"),
    (b'{"kind": "step", "schema_version": 9, "events": [{}]}', "unknown event kind"),
    (json.dumps({"kind": "step", "schema_version": 1, "events": [
        {"job_id": "bad", "host": "h", "rank": 0, "world_size": 1, "step": 1, "step_ms": -5, "ts": "2026-11-01T00:00:00Z"},
        {"job_id": "bad", "host": "h", "rank": 0, "world_size": 1, "step": 2, "step_ms": 5, "ts": "2026-11-01T00:00:00"},
        "not an object",
    ]}).encode(), "invalid step"),
    (None, "empty record"),
]


def test_malformed_corpus_goes_to_dead_letters_and_good_events_flow(topics: VigilSettings, ingest: IngestLoop) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    for value, _ in CORPUS:
        producer.produce_raw(topics.topic("steps"), value)
    good = steps("good", 2, 5)
    producer.send(good)
    producer.flush()
    expected_letters = len(CORPUS) + 2  # the mixed record yields three rejected events
    wait_until(lambda: ingest.stats.rejected >= expected_letters and ingest.stats.events >= len(good))
    letters = [json.loads(r.value or b"{}") for r in read_topics(topics, str(topics.kafka_bootstrap),
                                                                  [topics.topic("deadletter")])]
    reasons = [str(x["reason"]) for x in letters]
    assert len(letters) == expected_letters
    for _, why in CORPUS:
        assert any(why in r for r in reasons), why
    assert any("step_ms" in r for r in reasons) and any("UTC offset" in r for r in reasons)
    client = ingest.client
    assert scalar(client, "SELECT count() FROM dead_letters FINAL") == expected_letters
    rows = client.query("SELECT payload_bytes, payload_sha256 FROM dead_letters").result_rows  # type: ignore[attr-defined]
    assert {(x["payload_bytes"], x["payload_sha256"]) for x in letters} == set(rows)
    assert scalar(client, "SELECT count() FROM step_timings WHERE job_id = 'good'") == len(good)
    assert scalar(client, "SELECT count() FROM step_timings WHERE job_id = 'bad'") == 0


def test_an_event_the_store_refuses_is_dead_lettered_and_ingest_goes_on(topics: VigilSettings, ingest: IngestLoop) -> None:
    """A rank beyond UInt32 (refused by the contract since it bounds values as their columns do; the writer
    would dead-letter it as well): one bad value must not stall the stream."""
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    record = steps("mixed", 1, 3, gpus=1)
    record[1] = record[1].model_copy(update={"rank": 2**40})
    producer.send(record)
    producer.flush()
    later = steps("later", 2, 5)
    producer.send(later)
    producer.flush()
    wait_until(lambda: ingest.stats.rejected >= 1 and ingest.stats.events >= 2 + len(later))
    client = ingest.client
    assert scalar(client, "SELECT count() FROM step_timings WHERE job_id = 'mixed'") == 2
    assert scalar(client, "SELECT count() FROM step_timings WHERE job_id = 'later'") == len(later)
    [letter] = [json.loads(r.value or b"{}") for r in read_topics(topics, str(topics.kafka_bootstrap),
                                                                   [topics.topic("deadletter")])]
    assert "rank" in letter["reason"] and letter["topic"] == topics.topic("steps") and letter["offset"] >= 0
    assert letter["payload"]["event_id"] == record[1].event_id and letter["payload"]["rank"] == 2**40


def test_a_writer_bug_stops_ingest_and_the_service_reports_it(topics: VigilSettings, clickhouse_dsn: str,
                                                              database: str) -> None:
    """Not transient: no endless paused retry loop; health says so (vigil status: BAD), the CLI would exit 1."""
    from vigil.analyzer.service import AnalyzerService
    from vigil.service import StackContext

    ctx = StackContext(settings=topics, bootstrap=str(topics.kafka_bootstrap),
                       clickhouse=connect(clickhouse_dsn, database=database), clickhouse_dsn=clickhouse_dsn)
    service = AnalyzerService(ctx, AnalyzerSettings(detect=False, batch_s=0.2, group_id=f"bug-{database}"))
    service.start()
    try:
        assert service.ingest is not None

        class Broken:
            def write(self, events: object, batch: object) -> None:
                raise KeyError("a bug in a writer")

            def intents(self, partitions: object) -> dict[object, object]:
                return {}

        service.ingest.consumer.writer = Broken()  # type: ignore[assignment]
        producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
        producer.send(steps("bug", 1, 2))
        producer.flush()
        wait_until(lambda: service.failed, 60, "ingest to stop")
        health = service.health()
        assert health["ok"] is False and health["ingest"] == "failed" and "a bug in a writer" in health["last_error"]
        assert service.ingest.stats.events == 0
    finally:
        service.stop()


def test_a_huge_poison_record_is_dead_lettered_bounded_and_ingest_goes_on(topics: VigilSettings,
                                                                          ingest: IngestLoop) -> None:
    """A ~720 KB record that is refused gives a small dead letter (head, size, sha256), never a too-large one."""
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    [bad] = steps("huge", 1, 1, gpus=1)
    phases = {f"{'ü' * 240}{i:05d}": 1.0 for i in range(1_450)}  # escaped in JSON, each ü takes 6 bytes, not 2
    doc = {**bad.model_dump(mode="json"), "phases": phases, "step_ms": -1.0}  # refused by the contract
    value = json.dumps({"kind": "step", "schema_version": 1, "events": [doc]}, ensure_ascii=False).encode()
    assert 700_000 < len(value) < 1_000_000 < len(json.dumps(doc))
    producer.produce_raw(topics.topic("steps"), value)
    later = steps("after-huge", 1, 3)
    producer.send(later)
    producer.flush()
    wait_until(lambda: ingest.stats.rejected >= 1 and ingest.stats.events >= len(later))
    [raw] = read_topics(topics, str(topics.kafka_bootstrap), [topics.topic("deadletter")])
    letter = json.loads(raw.value or b"{}")
    assert len(raw.value or b"") < 8192
    assert letter["payload_truncated"] is True and letter["payload_bytes"] > 700_000
    assert len(letter["payload_sha256"]) == 64 and "step_ms" in letter["reason"]
    assert scalar(ingest.client, "SELECT count() FROM step_timings WHERE job_id = 'after-huge'") == len(later)
    [row] = ingest.client.query("SELECT payload_bytes, payload_sha256, payload_truncated, length(payload) "
                                "FROM dead_letters").result_rows
    assert row[:3] == (letter["payload_bytes"], letter["payload_sha256"], 1) and 4000 < row[3] <= 4096


def test_a_batch_on_more_days_than_one_insert_may_partition_is_split_not_retried_forever(clickhouse_dsn: str) -> None:
    """ClickHouse refuses an insert block over 100 partitions (code 252): smaller blocks store every event."""
    import uuid
    from datetime import UTC, datetime, timedelta

    from vigil.analyzer.ingest.writer import ClickHouseWriter
    from vigil.app.components import migrate_all

    client = connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}")
    migrate_all(client, 400)  # a retention that keeps 150 days
    start = datetime.now(UTC) - timedelta(days=150)
    events = [e for d in range(150) for e in steps("days", 1, 1, gpus=1, start=start + timedelta(days=d))]
    events = [e.model_copy(update={"step": i}) for i, e in enumerate(events)]
    writer = ClickHouseWriter(client=client, check_existing=False)
    assert writer.write(events) == []
    assert scalar(client, "SELECT uniqExact(step) FROM step_timings WHERE job_id = 'days'") == 150


def test_a_re_cut_batch_split_in_halves_stores_an_event_repeated_across_them_once(clickhouse_dsn: str) -> None:
    """A re-cut batch (its intent recorded before a crash) is judged against what was stored before the intent: an
    event in both halves of a split must not be stored by each (raw rows and the rollups' sums)."""
    import uuid
    from datetime import UTC, datetime, timedelta

    from vigil.analyzer.ingest.writer import ClickHouseWriter
    from vigil.app.components import migrate_all
    from vigil.kafka.consumer import BatchId, OffsetRange

    client = connect(clickhouse_dsn, database=f"t_{uuid.uuid4().hex[:10]}")
    migrate_all(client, 400)
    start = datetime.now(UTC) - timedelta(days=150)
    events = [e for d in range(150) for e in steps("recut", 1, 1, gpus=1, start=start + timedelta(days=d))]
    events = [e.model_copy(update={"step": i}) for i, e in enumerate(events)]
    replay = BatchId(ranges=(OffsetRange(topic="t", partition=0, first=0, last=150),),
                     first_attempt=datetime.now(UTC) - timedelta(minutes=1))
    writer = ClickHouseWriter(client=client)
    assert writer.write([*events, events[0]], replay) == []  # over 100 partitions: split in halves
    assert scalar(client, f"SELECT count() FROM step_timings WHERE event_id = '{events[0].event_id}'") == 1
    assert scalar(client, "SELECT count() FROM step_timings WHERE job_id = 'recut'") == 150
    assert scalar(client, "SELECT sum(ranks) FROM job_steps WHERE job_id = 'recut'") == 150
