"""Consumer error classes: transient failures are retried with backoff and shown; anything else stops it."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Sequence

import pytest

from tests.support.commit_doubles import FirstBatchDown, committed
from tests.support.consumer_doubles import FlakyWriter, Letters, consumer, send
from tests.support.waiting import wait_until
from vigil.contract import StepTiming
from vigil.contract.hotkinds import Ingestable
from vigil.errors import Unreachable
from vigil.kafka.consumer import BatchId, BatchingConsumer, ConsumerFailed, Unstorable
from vigil.kafka.deadletter import DeadLetter
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

pytestmark = [pytest.mark.kafka]


def test_a_transient_failure_is_retried_with_the_same_batch_and_shown(topics: VigilSettings) -> None:
    send(topics, 50)
    writer = FlakyWriter(Unreachable("ClickHouse: Code: 252. Too many parts"), failures=3)
    c = consumer(topics, writer, "g-transient")
    states: set[str] = set()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            states.add(c.stats.state)
            stop.wait(0.01)

    threading.Thread(target=watch, daemon=True).start()
    try:
        wait_until(lambda: c.poll() is None and len(writer.stored) == 50, 60, "the batch stored after retries")
    finally:
        stop.set()
        c.close()
    assert writer.calls == 4 and len(set(writer.tokens)) == 1, "the same batch (same token) is written again"
    assert "retrying" in states and c.stats.state == "running" and "Too many parts" in c.stats.last_error
    assert c.stats.write_errors == 3 and c.stats.events == 50


def test_any_other_failure_stops_the_consumer_and_commits_nothing(topics: VigilSettings) -> None:
    send(topics, 20)
    broken = consumer(topics, FlakyWriter(KeyError("bug in a writer"), failures=10**9), "g-fatal")
    with pytest.raises(ConsumerFailed, match="bug in a writer"):
        for _ in range(300):
            broken.poll()
    assert broken.stats.state == "failed" and broken.stats.events == 0
    broken.close()
    healthy = FlakyWriter(KeyError("never"), failures=0)
    again = consumer(topics, healthy, "g-fatal")  # the restarted service reads the same records again
    try:
        wait_until(lambda: again.poll() is None and len(healthy.stored) == 20, 60, "the batch re-read")
    finally:
        again.close()


class Refusing(FlakyWriter):
    """Stores every event but step 7, which it refuses as the engine refuses a bad value."""

    def write(self, events: Sequence[Ingestable], batch: BatchId) -> list[Unstorable]:
        super().write(events, batch)
        return [Unstorable(event=e, reason="bad value") for e in events if getattr(e, "step", None) == 7]


class Kept(Letters):
    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    def write(self, letters: Sequence[DeadLetter]) -> None:
        self.letters.extend(letters)


def test_an_event_the_writer_refuses_is_dead_lettered_with_the_record_that_carried_it(topics: VigilSettings) -> None:
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap), batch_events=4)
    producer.send([StepTiming(job_id="e", host="h0", rank=0, world_size=1, step=i, step_ms=1.0) for i in range(12)])
    producer.flush()  # 3 records of 4 events: step 7 is in the second
    letters = Kept()
    c = BatchingConsumer(settings=topics, bootstrap=str(topics.kafka_bootstrap), group_id="g-refused",
                         topics=["steps"], writer=Refusing(KeyError("never"), failures=0), dead_letters=letters,
                         max_batch_s=0.2, retry_backoff_s=0.1)
    try:
        wait_until(lambda: c.poll() is None and len(letters.letters) == 1, 60, "the refused event dead-lettered")
    finally:
        c.close()
    [letter] = letters.letters  # the test's own topics: the records are offsets 0, 1, 2 of one partition (one host)
    assert (letter.reason, letter.topic, letter.offset) == ("bad value", topics.topic("steps"), 1)
    assert letter.payload["step"] == 7


def test_a_stop_during_a_retried_write_commits_nothing_past_the_unwritten_batch(topics: VigilSettings) -> None:
    """Stopped while the first batch's write is retried, the consumer writes what it read after it (a re-read
    is deduplicated) but commits nothing: committing a later batch's offsets would skip the first for good."""
    for r in range(4):  # one record a send, one host: one partition, offsets 0..3, a batch per record
        producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
        producer.send([StepTiming(job_id="s", host="h0", rank=0, world_size=1, step=r * 5 + i, step_ms=1.0)
                       for i in range(5)])
        producer.flush()
    writer = FirstBatchDown()  # never `up`: the first batch is refused for good
    group = f"g-stop-{uuid.uuid4().hex[:6]}"
    ingest = BatchingConsumer(settings=topics, bootstrap=str(topics.kafka_bootstrap), group_id=group, topics=["steps"],
                              writer=writer, dead_letters=Letters(), max_batch_events=5, max_batch_s=0.2,
                              retry_backoff_s=0.1, max_backoff_s=0.2)
    stop = threading.Event()
    worker = threading.Thread(target=ingest.run, args=(stop,), daemon=True)
    worker.start()
    wait_until(lambda: writer.refused >= 3 and ingest.stats.state == "retrying", 60, "the first batch retried")
    stop.set()
    worker.join(60)
    assert not worker.is_alive()
    assert committed(topics, group) == 0, "committed past the unwritten batch"
