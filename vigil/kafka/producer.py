"""Producing events: batched JSON records, keyed by host, idempotent, acks=all.

`EventProducer.send(events)` groups events by (topic, kind, version, host) and
writes each group as records of up to `batch_events` events, so one host's
events stay ordered on one partition. librdkafka's queue is bounded; when it is
full `send` waits up to `block_s` and then raises DeliveryError. Failed deliveries
are counted and handed to `on_failure` with the events that were lost, so a
caller such as the node agent can spool them to disk; `flush` raises DeliveryError
when any record failed since the previous flush, so "flushed" means "stored". With a `signer` every
decision it sends is signed with that role's key (`vigil.signing`): a service's producer is where its
decisions get their signature.

A record never exceeds `max_record_bytes` (below librdkafka's and the broker's default
`message.max.bytes`, 1,000,000): a group whose record would is split in halves until each
fits; one event that alone does not fit can never be sent, so it is skipped, counted in
`oversized` and logged, and `send` goes on (a caller's spool would otherwise retry it forever).
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaError, Producer

from vigil.contract.base import Event
from vigil.contract.registry import topic_of
from vigil.contract.wire import encode_batch
from vigil.errors import DeliveryError
from vigil.kafka.admin import client_config
from vigil.settings import VigilSettings
from vigil.signing.seal import Signer

FailureHook = Callable[[Sequence[Event], str], None]
MAX_RECORD_BYTES = 900_000
log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class EventProducer:
    settings: VigilSettings
    bootstrap: str
    batch_events: int = 500
    block_s: float = 10.0
    max_buffer_kbytes: int = 64 * 1024
    max_record_bytes: int = MAX_RECORD_BYTES
    on_failure: FailureHook | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    signer: Signer | None = None
    delivered: int = field(default=0, init=False)
    failed: int = field(default=0, init=False)
    oversized: int = field(default=0, init=False)  # events skipped: alone over max_record_bytes
    last_error: str = field(default="", init=False)
    _failed_seen: int = field(default=0, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        conf = {
            **client_config(self.settings, self.bootstrap),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 20,
            "compression.type": "lz4",
            "queue.buffering.max.kbytes": self.max_buffer_kbytes,
            "message.timeout.ms": 30_000,
            **self.extra,
        }
        self._producer = Producer(conf)

    def send(self, events: Sequence[Event]) -> int:
        """Queue events for delivery; returns the number of records produced."""
        groups: dict[tuple[str, str, int, str], list[Event]] = defaultdict(list)
        if self.signer is not None:
            events = [self.signer.seal(e) for e in events]
        for e in events:
            groups[(topic_of(e), str(e.kind), int(e.schema_version), e.host)].append(e)
        records = 0
        for (logical, _kind, _v, host), group in groups.items():
            for i in range(0, len(group), self.batch_events):
                records += self._send_fitting(self.settings.topic(logical), host.encode(), group[i : i + self.batch_events])
        self._producer.poll(0)
        return records

    def _send_fitting(self, topic: str, key: bytes, chunk: Sequence[Event]) -> int:
        """Produce `chunk` as records of at most `max_record_bytes`; returns how many."""
        value = encode_batch(chunk)
        if len(value) <= self.max_record_bytes:
            self._produce(topic, key, value, chunk)
            return 1
        if len(chunk) == 1:
            with self._lock:
                self.oversized += 1
            log.warning("%s event %s is %d bytes, over the %d-byte record limit: skipped (%d so far)", chunk[0].kind,
                        chunk[0].event_id, len(value), self.max_record_bytes, self.oversized)
            return 0
        mid = len(chunk) // 2
        return self._send_fitting(topic, key, chunk[:mid]) + self._send_fitting(topic, key, chunk[mid:])

    def produce_raw(self, topic: str, value: bytes | None, key: bytes | None = None) -> None:
        """Produce an already-encoded record (dead letters, replays, tests; None: a record with no value)."""
        self._produce(topic, key, value, [])

    def _produce(self, topic: str, key: bytes | None, value: bytes | None, events: Sequence[Event]) -> None:
        def done(err: KafkaError | None, _msg: Any) -> None:
            with self._lock:
                if err is None:
                    self.delivered += len(events) or 1
                    return
                self.failed += len(events) or 1
                self.last_error = f"{topic}: {err.str()}"
            if self.on_failure is not None and events:
                self.on_failure(events, err.str())

        waited = 0.0
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=done)
                return
            except BufferError:
                if waited >= self.block_s:
                    raise DeliveryError(
                        f"Kafka {self.bootstrap}: local queue full for {self.block_s:.0f}s (broker slow or down)"
                    ) from None
                self._producer.poll(0.1)
                waited += 0.1

    def poll(self, timeout: float = 0) -> None:
        self._producer.poll(timeout)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait for every queued record; DeliveryError if some are still undelivered or failed.

        Failures are reported once: a flush raises for the records that failed since
        the previous flush.
        """
        remaining = self._producer.flush(timeout)
        if remaining:
            raise DeliveryError(f"Kafka {self.bootstrap}: {remaining} records undelivered after {timeout:.0f}s")
        with self._lock:
            new_failures, self._failed_seen = self.failed - self._failed_seen, self.failed
            error = self.last_error
        if new_failures:
            raise DeliveryError(f"Kafka {self.bootstrap}: {new_failures} events not delivered ({error})")

    def pending(self) -> int:
        return len(self._producer)
