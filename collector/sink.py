"""Where shipped events go: Kafka (`KafkaSink`) or memory (`MemorySink`, tests and dry runs).

`ObservedSink` wraps either and shows each delivered batch to an observer.
`deliver(events)` returns once every event is acknowledged, or raises DeliveryError
(or Unreachable / StackError while no broker can be found). KafkaSink uses a short
message timeout (the agent has its own disk spool, so librdkafka need not retry for
30 s), makes sure the telemetry topics exist whenever it (re)connects (an embedded
broker restarted empty), and starts a fresh producer after any failure. An event too big
for any record is skipped by the producer, not failed (see `vigil.kafka.producer`): it
could never be delivered, and retrying it would stop everything behind it; `oversized`
counts those.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vigil.contract import TELEMETRY_TOPICS, Event
from vigil.errors import DeliveryError
from vigil.settings import VigilSettings


class Sink(Protocol):
    def deliver(self, events: Sequence[Event]) -> None:
        """Hand the events over durably before returning; DeliveryError otherwise."""

    def close(self) -> None: ...


@dataclass(kw_only=True)
class MemorySink:
    """Keeps delivered events in a list; `down = True` makes deliveries fail."""

    events: list[Event] = field(default_factory=list)
    down: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def deliver(self, events: Sequence[Event]) -> None:
        if self.down:
            raise DeliveryError("memory sink is down")
        with self._lock:
            self.events.extend(events)

    def close(self) -> None:
        pass


@dataclass(kw_only=True)
class KafkaSink:
    settings: VigilSettings
    bootstrap: Callable[[], str]
    timeout_s: float = 5.0
    batch_events: int = 500
    oversized: int = 0
    _producer: object | None = field(default=None, init=False, repr=False)

    def _connect(self) -> object:
        from vigil.kafka.admin import ensure_topics
        from vigil.kafka.producer import EventProducer

        address = self.bootstrap()
        ensure_topics(self.settings, address, TELEMETRY_TOPICS, timeout=self.timeout_s)
        ms = int(self.timeout_s * 1000)
        return EventProducer(
            settings=self.settings, bootstrap=address, batch_events=self.batch_events, block_s=self.timeout_s,
            extra={"message.timeout.ms": ms, "socket.connection.setup.timeout.ms": ms,
                   "reconnect.backoff.max.ms": 1000, "linger.ms": 5},
        )

    def deliver(self, events: Sequence[Event]) -> None:
        from vigil.kafka.producer import EventProducer

        if not events:
            return
        if self._producer is None:
            self._producer = self._connect()
        producer = self._producer
        assert isinstance(producer, EventProducer)
        failed_before, oversized_before = producer.failed, producer.oversized
        try:
            producer.send(events)
            self.oversized += producer.oversized - oversized_before
            producer.flush(self.timeout_s + 2.0)
        except DeliveryError:
            self._producer = None
            raise
        if producer.failed != failed_before:
            self._producer = None
            raise DeliveryError(f"Kafka {producer.bootstrap}: {producer.last_error}")

    def close(self) -> None:
        self._producer = None


@dataclass(kw_only=True)
class ObservedSink:
    """Delivers through `inner`, then shows what was delivered to `observe` (recovery control
    follows training progress this way); an observer that raises never fails a delivery."""

    inner: Sink
    observe: Callable[[Sequence[Event]], None]

    def deliver(self, events: Sequence[Event]) -> None:
        self.inner.deliver(events)
        try:
            self.observe(events)
        except Exception:
            logging.getLogger(__name__).exception("observing delivered events failed")

    def close(self) -> None:
        self.inner.close()
