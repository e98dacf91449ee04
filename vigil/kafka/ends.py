"""Where each partition's log ends, confirmed by a fetch, not taken from ListOffsets alone.

The end offset of a partition (the high watermark: the offset the next record gets) is what lag
and the ingest frontier are measured against. ListOffsets(latest) is the usual way to ask, but
the embedded Tansu broker (0.6.0) answers it with the base offset of the partition's last record
batch plus one, so it stays below the end for good whenever that batch holds more than one record
(listed 55 for a partition whose last offset is 153). Its Fetch responses carry the true high
watermark. `confirmed_ends` therefore takes the listed offsets as a lower bound and confirms each
partition by one fetch from there: a throwaway consumer (assigned, never joining a group, never
committing) reads either a record, whose fetch response carries the partition's high watermark,
or the end-of-partition signal at the true end. On a real Kafka both answers agree (the fetch
costs one round trip), so the result is the same there; a partition whose fetch does not come
back within the timeout raises `EndsUnconfirmed` rather than passing the lower bound off as
the end.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping

from confluent_kafka import Consumer, KafkaError, TopicPartition

from vigil.kafka.admin import client_config
from vigil.settings import VigilSettings

Part = tuple[str, int]


class EndsUnconfirmed(RuntimeError):
    """No fetch answered for some partitions in time: their end (and any lag against it) is unknown."""


def confirmed_ends(settings: VigilSettings, bootstrap: str, listed: Mapping[Part, int],
                   timeout: float = 10.0) -> dict[Part, int]:
    """Each partition's end offset: max(listed, the high watermark a fetch from `listed` reports)."""
    if not listed:
        return {}
    consumer = Consumer({
        **client_config(settings, bootstrap),
        "group.id": f"vigil-ends-{uuid.uuid4().hex[:8]}",  # required by librdkafka; never joined
        "enable.auto.commit": False,
        "enable.partition.eof": True,
        "fetch.wait.max.ms": 10,  # at the end a fetch answers at once, not after the default 500 ms
        "max.partition.fetch.bytes": 1,  # one record batch per partition is all a fetch needs to carry
    })
    ends = dict(listed)
    pending = set(listed)
    try:
        consumer.assign([TopicPartition(t, p, max(0, off)) for (t, p), off in listed.items()])
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=500, timeout=0.1):
                err = msg.error()
                if err is not None and err.code() != KafkaError._PARTITION_EOF:
                    continue
                key = (str(msg.topic()), int(msg.partition() or 0))
                if key not in pending:
                    continue
                high = int(consumer.get_watermark_offsets(TopicPartition(*key), cached=True)[1])
                at = int(msg.offset() or 0) + (0 if err is not None else 1)  # EOF: at the end; record: past it
                ends[key] = max(ends[key], high, at)
                pending.discard(key)
    finally:
        consumer.close()
    if pending:
        raise EndsUnconfirmed(f"no fetch confirmed the end of {len(pending)} partitions within {timeout:g} s: "
                              + ", ".join(f"{t}[{p}]" for t, p in sorted(pending)[:5]))
    return ends
