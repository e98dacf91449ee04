"""Producer, batching consumer and dead letters against the real embedded broker."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest

from vigil.contract import Event, StepTiming, decode_batch
from vigil.errors import DeliveryError
from vigil.kafka.broker import free_port
from vigil.kafka.consumer import BatchingConsumer, Unstorable
from vigil.kafka.deadletter import KafkaDeadLetters
from vigil.kafka.producer import EventProducer
from vigil.kafka.reader import read_topics
from vigil.settings import VigilSettings

pytestmark = pytest.mark.kafka


class ListWriter:
    def __init__(self, fail_times: int = 0) -> None:
        self.events: list[Event] = []
        self.fail_times = fail_times
        self.calls = 0

    def write(self, events: Sequence[Event], batch: object = None) -> list[Unstorable]:
        self.calls += 1
        if self.fail_times > 0:
            self.fail_times -= 1
            raise ConnectionError("store down")
        self.events.extend(events)
        return []


def steps(n: int, hosts: int = 3) -> list[StepTiming]:
    return [
        StepTiming(job_id="j", host=f"h{i % hosts}", rank=i % hosts, world_size=hosts, step=i // hosts,
                   step_ms=100.0 + i, phases={"forward": 40.0, "backward": 60.0})
        for i in range(n)
    ]


def consume_until(consumer: BatchingConsumer, predicate: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        consumer.poll(timeout=0.2)
        if predicate():  # type: ignore[operator]
            return
    raise AssertionError("consumer did not reach the expected state in time")


def make_consumer(settings: VigilSettings, writer: ListWriter, producer: EventProducer, **kw: object) -> BatchingConsumer:
    return BatchingConsumer(
        settings=settings, bootstrap=str(settings.kafka_bootstrap), group_id="g-" + settings.topic_prefix,
        topics=["steps"], writer=writer, dead_letters=KafkaDeadLetters(producer), max_batch_s=0.3, **kw,  # type: ignore[arg-type]
    )


def test_batched_round_trip_keeps_every_event(topics: VigilSettings) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap), batch_events=100)
    sent = steps(1000)
    records = producer.send(sent)
    producer.flush()
    assert records == 12  # 3 hosts x ceil(334/100): batching, not one record per event
    writer = ListWriter()
    consumer = make_consumer(topics, writer, producer)
    consume_until(consumer, lambda: len(writer.events) >= 1000)
    consumer.close()
    assert sorted(e.event_id for e in writer.events) == sorted(e.event_id for e in sent)
    per_host = [e.step for e in writer.events if e.host == "h1"]  # type: ignore[attr-defined]
    assert per_host == sorted(per_host), "one host's events stay ordered"


class StagingWriter(ListWriter):
    """Holds the first write until the consumer has staged the batch after it (or 30 s pass)."""

    def __init__(self) -> None:
        super().__init__()
        self.staged: list[tuple[Sequence[Event], int]] = []
        self.written: list[Sequence[Event]] = []
        self.ahead = threading.Event()

    def stage(self, events: Sequence[Event]) -> None:
        self.staged.append((events, len(events)))
        self.ahead.set()

    def write(self, events: Sequence[Event], batch: object = None) -> list[Unstorable]:
        if not self.written:
            self.ahead.wait(30)
        self.written.append(events)
        return super().write(events, batch)


def test_a_staging_writer_gets_each_next_batch_ahead_on_the_consumer_thread(topics: VigilSettings) -> None:
    """While a batch is written, the next one is staged, then handed over as that very list, unchanged."""
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap), batch_events=100)
    sent = steps(1000)
    producer.send(sent)
    producer.flush()
    writer = StagingWriter()
    consumer = make_consumer(topics, writer, producer, max_batch_events=200)
    consume_until(consumer, lambda: len(writer.events) >= 1000)
    consumer.close()
    assert sorted(e.event_id for e in writer.events) == sorted(e.event_id for e in sent)
    assert writer.staged, "the batch after the one in flight was staged"
    for events, size in writer.staged:
        assert any(w is events for w in writer.written) and len(events) == size
    assert writer.staged[0][0] is writer.written[1], "the first staged batch is the second written"


def test_bad_records_go_to_dead_letters_and_consumption_continues(topics: VigilSettings) -> None:
    bootstrap = str(topics.kafka_bootstrap)
    producer = EventProducer(settings=topics, bootstrap=bootstrap)
    topic = topics.topic("steps")
    producer.produce_raw(topic, b"\x00not json")
    good, bad = steps(2)[0].model_dump(mode="json"), {"job_id": "j", "host": "h", "rank": 0}
    producer.produce_raw(topic, json.dumps({"kind": "step", "schema_version": 1, "events": [good, bad]}).encode())
    producer.produce_raw(topic, json.dumps({"kind": "nope", "schema_version": 1, "events": []}).encode())
    producer.send(steps(5))
    producer.flush()
    writer = ListWriter()
    consumer = make_consumer(topics, writer, producer)
    consume_until(consumer, lambda: len(writer.events) >= 6 and consumer.stats.rejected >= 3)
    consumer.close()

    letters = [json.loads(r.value or b"") for r in read_topics(topics, bootstrap, [topics.topic("deadletter")])]
    reasons = sorted(str(item["reason"]) for item in letters)
    assert len(letters) == 3
    assert any(r.startswith("not JSON") for r in reasons)
    assert any("unknown event kind" in r for r in reasons)
    missing = next(r for r in reasons if r.startswith("invalid step"))
    assert "world_size: Field required" in missing and "step_ms: Field required" in missing
    assert all(item["topic"] == topic and isinstance(item["offset"], int) for item in letters)


def test_flush_raises_when_records_failed_and_only_once() -> None:
    settings = VigilSettings(kafka_bootstrap=f"127.0.0.1:{free_port()}")
    producer = EventProducer(settings=settings, bootstrap=str(settings.kafka_bootstrap),
                             extra={"message.timeout.ms": 300})
    producer.send(steps(4))
    with pytest.raises(DeliveryError, match="4 events not delivered"):
        producer.flush(10)
    producer.flush(10)  # reported already: nothing new failed


def test_dead_letters_the_broker_did_not_take_leave_the_batch_uncommitted(topics: VigilSettings) -> None:
    bootstrap = str(topics.kafka_bootstrap)
    producer = EventProducer(settings=topics, bootstrap=bootstrap)
    producer.produce_raw(topics.topic("steps"), b"garbage")
    producer.flush()
    nowhere = EventProducer(settings=topics, bootstrap=f"127.0.0.1:{free_port()}", extra={"message.timeout.ms": 300})
    first = make_consumer(topics, ListWriter(), nowhere)
    give_up = threading.Event()
    give_up.set()  # one write attempt, then stop retrying
    deadline = time.monotonic() + 30
    while first.stats.write_errors == 0 and time.monotonic() < deadline:
        first.poll(0.2, stop=give_up)
    assert first.stats.write_errors == 1 and first.stats.rejected == 0
    first.close()

    second = make_consumer(topics, ListWriter(), producer)  # same group: the record was not committed
    consume_until(second, lambda: second.stats.rejected == 1)
    second.close()
    letters = [json.loads(r.value or b"") for r in read_topics(topics, bootstrap, [topics.topic("deadletter")])]
    assert [item["reason"][:8] for item in letters] == ["not JSON"]


def test_failed_write_is_retried_and_not_committed_before(topics: VigilSettings) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    producer.send(steps(30))
    producer.flush()
    writer = ListWriter(fail_times=2)
    consumer = make_consumer(topics, writer, producer, retry_backoff_s=0.1)
    consume_until(consumer, lambda: len(writer.events) >= 30)
    assert consumer.stats.write_errors == 2
    assert len(writer.events) == 30
    consumer.close()


def test_run_stops_and_commits_pending_batch(topics: VigilSettings) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    producer.send(steps(10))
    producer.flush()
    writer = ListWriter()
    consumer = make_consumer(topics, writer, producer)
    stop = threading.Event()
    t = threading.Thread(target=consumer.run, args=(stop,))
    t.start()
    deadline = time.monotonic() + 20
    while len(writer.events) < 10 and time.monotonic() < deadline:
        time.sleep(0.1)
    stop.set()
    t.join(10)
    assert not t.is_alive()
    # a second consumer of the same group finds nothing left: offsets were committed
    again = ListWriter()
    second = make_consumer(topics, again, producer)
    end = time.monotonic() + 4
    while time.monotonic() < end:
        second.poll(0.2)
    second.close()
    assert len(writer.events) == 10 and again.events == []


def test_topics_are_created_once_with_configured_partitions_and_retention(broker_bootstrap: str) -> None:
    from confluent_kafka.admin import ConfigResource, ResourceType

    from vigil.kafka.admin import admin_client, ensure_topics

    settings = VigilSettings(kafka_bootstrap=broker_bootstrap, topic_prefix=f"cfg{time.monotonic_ns()}.",
                             topic_partitions=3, topic_retention_ms=3_600_000)
    created = ensure_topics(settings, broker_bootstrap, ["steps", "alerts"])
    assert sorted(created) == [settings.topic("alerts"), settings.topic("steps")]
    assert ensure_topics(settings, broker_bootstrap, ["steps", "alerts"]) == []
    admin = admin_client(settings, broker_bootstrap)
    meta = admin.list_topics(timeout=10)
    assert len(meta.topics[settings.topic("steps")].partitions) == 3
    resource = ConfigResource(ResourceType.TOPIC, settings.topic("steps"))
    config = admin.describe_configs([resource])[resource].result(10)
    assert config["retention.ms"].value == "3600000"


def test_records_are_split_to_fit_and_an_event_that_never_fits_is_skipped_and_counted(topics: VigilSettings) -> None:
    """500 log lines of 8 KB from varying ranks were one 4 MB record the broker refused; now they all arrive."""
    from vigil.contract import LogLine

    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    lines = [LogLine(job_id="j", host="h0", rank=i % 64, category="nccl_error", severity="error",
                     message=f"[rank{i % 64}]: " + "z" * 8000) for i in range(500)]
    [huge] = steps(1, hosts=1)
    huge = StepTiming.model_validate({**huge.model_dump(), "phases": {f"phase{i:06d}": 1.0 for i in range(60_000)}})
    [normal] = steps(1, hosts=1)
    records = producer.send([*lines, huge, normal])
    producer.flush()
    assert records >= 6 and producer.oversized == 1 and producer.failed == 0
    got = list(read_topics(topics, str(topics.kafka_bootstrap), [topics.topic("logs"), topics.topic("steps")]))
    assert all(len(r.value or b"") <= producer.max_record_bytes for r in got)
    ids = {e.event_id for r in got for e in decode_batch(r.value).events}
    assert ids == {e.event_id for e in [*lines, normal]}



def test_a_read_to_the_end_that_stalls_raises_instead_of_returning_part_of_the_log(
        settings: VigilSettings, tmp_path: Path) -> None:
    """The broker goes away mid-read: the caller gets ReadIncomplete, never a partial log taken for the whole."""
    from pydantic import SecretStr

    from vigil.kafka.admin import ensure_topics
    from vigil.kafka.broker import EmbeddedBroker
    from vigil.kafka.reader import ReadIncomplete

    broker = EmbeddedBroker(port=free_port(), log_path=tmp_path / "broker.log")
    bootstrap = broker.start()
    try:
        small = {"fetch.max.bytes": "20000", "max.partition.fetch.bytes": "20000", "message.max.bytes": "20000",
                 "receive.message.max.bytes": "30000",
                 "queued.max.messages.kbytes": "20", "fetch.wait.max.ms": "10"}  # the reader holds little ahead
        own = settings.model_copy(update={"kafka_bootstrap": bootstrap,
                                          "kafka_extra": {k: SecretStr(v) for k, v in small.items()}})
        ensure_topics(own, bootstrap)
        producer = EventProducer(settings=own, bootstrap=bootstrap, batch_events=1)
        producer.send([StepTiming(job_id="j", host="h", rank=0, world_size=1, step=i, step_ms=1.0,
                                  phases={f"p{k}": 1.0 for k in range(150)}) for i in range(2000)])
        producer.flush()
        records = read_topics(own, bootstrap, [own.topic("steps")], timeout=2.0)
        next(records)
        broker.stop()
        with pytest.raises(ReadIncomplete, match="refusing a partial read"):
            for _ in records:
                pass
    finally:
        broker.stop()
