"""Reading a topic without joining a consumer group: for `vigil tail`, alerts views and tests.

Assigns every partition directly (no group rebalance, no committed offsets), from
the beginning or the end, and yields records until `max_records`, or the end of the
log when `until_end` is set, else until the timeout.

With `until_end` (what every rebuild of state uses) the read is complete or it fails:
it goes on while records keep coming, to the end of every partition as the broker
reports it at the start (the end-of-partition signal, and at least the high watermark
seen at the start), and `timeout` bounds only a stall (no record and no end for that
long), after which `ReadIncomplete` is raised: a caller never acts on part of a log
believing it whole. A partition is also read to its end once a record produced after
the read began comes from it (the log is in order), and only records from before keep
the read going: on a live topic (agents' keep-alives every few seconds) the read ends
instead of following the traffic forever. (Record times are the producers' clocks: a
producer far ahead of this one can end a partition's read early.)
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from vigil.contract import Event
from vigil.contract.wire import decode_batch
from vigil.errors import Unreachable
from vigil.kafka.admin import client_config, unreachable
from vigil.settings import VigilSettings

E = TypeVar("E", bound=Event)


class ReadIncomplete(Unreachable):
    """A read to the end of the log stalled before it got there; the message says where."""


@dataclass(frozen=True, kw_only=True)
class RawRecord:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int


def read_topics(
    settings: VigilSettings,
    bootstrap: str,
    topics: list[str],
    *,
    from_beginning: bool = True,
    timeout: float = 5.0,
    until_end: bool = True,
    max_records: int | None = None,
) -> Iterator[RawRecord]:
    """Yield raw records of the physical `topics`; stops at the end of the log when `until_end`."""
    conf: dict[str, Any] = {
        **client_config(settings, bootstrap),
        "group.id": f"vigil-reader-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    }
    consumer = Consumer(conf)
    call_timeout = min(timeout, 10.0)  # librdkafka takes int32 milliseconds
    try:
        try:
            meta = consumer.list_topics(timeout=call_timeout)
        except KafkaException as exc:
            raise unreachable(settings, bootstrap, exc) from None
        parts = [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics if t in meta.topics for p in meta.topics[t].partitions]
        started_ms = int(time.time() * 1000)
        ends: dict[tuple[str, int], int] = {}  # high watermarks at the start (the embedded broker may under-report)
        if until_end and from_beginning:
            for tp in parts:
                try:
                    ends[(tp.topic, tp.partition)] = consumer.get_watermark_offsets(tp, timeout=call_timeout,
                                                                                    cached=False)[1]
                except KafkaException as exc:
                    raise unreachable(settings, bootstrap, exc) from None
        if not from_beginning:
            # The embedded broker under-reports high watermarks (and ignores OFFSET_END), so records
            # created before this call are also skipped by timestamp below.
            for tp in parts:
                tp.offset = consumer.get_watermark_offsets(tp, timeout=call_timeout, cached=False)[1]
        if not parts:
            return
        consumer.assign(parts)
        remaining = {(tp.topic, tp.partition) for tp in parts}
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.2):
                err = msg.error()
                where = (str(msg.topic()), int(msg.partition() or 0))
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF and int(msg.offset() or 0) >= ends.get(where, 0):
                        remaining.discard(where)
                    continue
                if until_end:
                    if msg.timestamp()[1] >= started_ms:
                        remaining.discard(where)  # produced after the read began: the log as it was is read
                    else:
                        deadline = time.monotonic() + timeout  # progress: only a stall ends a read to the end
                if not from_beginning and msg.timestamp()[1] < started_ms:
                    continue
                yield RawRecord(topic=str(msg.topic()), partition=int(msg.partition() or 0), offset=int(msg.offset() or 0),
                                key=msg.key(), value=msg.value(), timestamp_ms=msg.timestamp()[1])
                seen += 1
                if max_records is not None and seen >= max_records:
                    return
            if until_end and not remaining:
                return
        if until_end and remaining:
            lagging = ", ".join(f"{t}[{p}]" for t, p in sorted(remaining)[:5])
            raise ReadIncomplete(f"Kafka {bootstrap}: reading to the end stalled for {timeout:g} s before the end of "
                                 f"{len(remaining)} partitions ({lagging}); refusing a partial read")
    finally:
        consumer.close()


def read_events(settings: VigilSettings, bootstrap: str, logical: str, kind: type[E], timeout: float = 10.0) -> list[E]:
    """Every event of type `kind` on the logical topic `logical` (e.g. all alerts), oldest first per partition."""
    out: list[E] = []
    for rec in read_topics(settings, bootstrap, [settings.topic(logical)], timeout=timeout):
        out.extend(e for e in decode_batch(rec.value).events if isinstance(e, kind))
    return out
