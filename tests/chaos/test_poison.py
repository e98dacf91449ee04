"""The poison corpus (poison.py) through the real broker into the real analyzer ingest and ClickHouse.

Every refused record or event is dead-lettered exactly once, with its reason, where it came from
(partition, offset) and its bounded payload, on the topic and in the `dead_letters` table; every
valid event is stored exactly once (counted by event id, a re-delivery included); the ingest goes
on and its consumer group's lag returns to zero.
"""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator

import pytest

from tests.support.poison import corpus, valid_ids
from tests.support.poison_feed import produce
from tests.support.waiting import wait_until
from vigil.analyzer.ingest.loop import INGEST_TOPICS, IngestLoop
from vigil.analyzer.settings import AnalyzerSettings
from vigil.clickhouse.client import connect
from vigil.contract.fastwire import decode_fast
from vigil.contract.wire import decode_batch
from vigil.kafka.lag import LagProbe
from vigil.kafka.producer import EventProducer
from vigil.kafka.reader import read_topics
from vigil.settings import VigilSettings


@pytest.mark.pure
def test_the_corpus_is_deterministic_broad_and_labelled_as_the_contract_decides() -> None:
    cases = corpus()
    assert len(cases) >= 300 and cases == corpus()
    assert {"envelope", "kind", "encoding", "number", "timestamp", "identifier", "size", "mixed",
            "duplicate", "columnar"} <= {c.family for c in cases}
    assert sum(c.letters for c in cases) >= 250 and len(valid_ids(cases)) >= 250
    for c in cases:
        d, f = decode_batch(c.value), decode_fast(c.value)  # the contract, and the ingest's fast path
        assert (len(d.rejected), tuple(e.event_id for e in d.events)) == (c.letters, c.stored), c.name
        assert (len(f.rejected), tuple(e.event_id for e in f.events)) == (c.letters, c.stored), c.name


@pytest.fixture
def ingest(topics: VigilSettings, clickhouse_dsn: str, database: str) -> Iterator[IngestLoop]:
    client = connect(clickhouse_dsn, database=database)
    producer = EventProducer(settings=topics, bootstrap=str(topics.kafka_bootstrap))
    loop = IngestLoop(settings=topics, analyzer=AnalyzerSettings(batch_s=0.3, group_id=f"g-{database}"),
                      bootstrap=str(topics.kafka_bootstrap), client=client, producer=producer)
    stop = threading.Event()
    t = threading.Thread(target=loop.run, args=(stop,))
    t.start()
    yield loop
    stop.set()
    t.join(30)


@pytest.mark.chaos
@pytest.mark.kafka
@pytest.mark.clickhouse
def test_every_poison_is_dead_lettered_once_and_every_valid_event_stored_once(topics: VigilSettings,
                                                                              ingest: IngestLoop) -> None:
    cases = corpus()
    where = produce(topics, cases)
    letters_due = sum(c.letters for c in cases)
    valid = valid_ids(cases)
    probe = LagProbe(settings=topics, bootstrap=str(topics.kafka_bootstrap), group_id=ingest.analyzer.group_id,
                     topics=INGEST_TOPICS)
    wait_until(lambda: ingest.failed or probe.sample().get(topics.topic("steps"), -1) == 0, 240,
               "the ingest's lag to return to zero")
    assert ingest.failed == "" and ingest.stats.rejected == letters_due

    raw = list(read_topics(topics, str(topics.kafka_bootstrap), [topics.topic("deadletter")]))
    letters = [json.loads(r.value or b"{}") for r in raw]
    per_record = Counter((int(x["partition"]), int(x["offset"])) for x in letters)
    expected = Counter({at: c.letters for at, c in where.items() if c.letters})
    assert per_record == expected, [where[at].name for at in set(per_record) ^ set(expected)]
    for r, x in zip(raw, letters, strict=True):
        assert x["topic"] == topics.topic("steps") and x["reason"] and len(x["payload_sha256"]) == 64, x
        assert len(r.value or b"") < 8192, x["reason"]  # bounded, whatever the poison's size

    client = ingest.client
    rows = client.query("SELECT partition, offset, count() FROM dead_letters FINAL GROUP BY partition, offset").result_rows
    assert Counter({(int(p), int(o)): int(n) for p, o, n in rows}) == expected
    stored = client.query("SELECT event_id, count() FROM step_timings GROUP BY event_id").result_rows  # this test's db
    counts = {str(i): int(n) for i, n in stored}
    assert counts.keys() == valid and set(counts.values()) == {1}, "each valid event stored once, nothing else"
