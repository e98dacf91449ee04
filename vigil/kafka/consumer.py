"""Consuming events: decode -> validate -> batch (size/time) -> write -> commit after the write.

One consumer group over several topics. Each polled record is decoded per event;
rejected events and undecodable records become dead letters. A batch is handed to
the `BatchWriter` and, only once it and its dead letters are durably stored, the
offsets are committed. A write that fails is retried (partitions paused, the
group kept alive) until it succeeds or the consumer is stopped: nothing is
skipped. Events the writer can never store (valid by the contract, refused by the
store) come back from `write` and become dead letters too, so one bad value never
stalls the stream. A crash between write and commit re-delivers the batch; writers
dedup on `event_id`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from confluent_kafka import Consumer, KafkaError, TopicPartition

from vigil.contract.base import Event
from vigil.contract.wire import decode_batch
from vigil.kafka.admin import client_config
from vigil.kafka.deadletter import DeadLetter, DeadLetterSink
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Unstorable:
    """An event its writer can never store, whatever the retries, and why."""

    event: Event
    reason: str


class BatchWriter(Protocol):
    def write(self, events: Sequence[Event]) -> Sequence[Unstorable]:
        """Store the events durably (idempotently by event_id) before returning; raise while
        the store fails; return the events that can never be stored."""


@dataclass(kw_only=True)
class ConsumerStats:
    records: int = 0
    events: int = 0
    rejected: int = 0
    batches: int = 0
    write_errors: int = 0
    last_error: str = ""
    last_commit_ts: float = 0.0


@dataclass
class _Batch:
    events: list[Event] = field(default_factory=list)
    sources: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # event_id -> topic, partition, offset
    letters: list[DeadLetter] = field(default_factory=list)
    offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    def __len__(self) -> int:
        return len(self.events) + len(self.letters)


@dataclass(kw_only=True)
class BatchingConsumer:
    settings: VigilSettings
    bootstrap: str
    group_id: str
    topics: Sequence[str]
    writer: BatchWriter
    dead_letters: DeadLetterSink
    max_batch_events: int = 20_000
    max_batch_s: float = 1.0
    from_beginning: bool = True
    retry_backoff_s: float = 1.0
    stats: ConsumerStats = field(default_factory=ConsumerStats)

    def __post_init__(self) -> None:
        conf: dict[str, Any] = {
            **client_config(self.settings, self.bootstrap),
            "group.id": self.group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if self.from_beginning else "latest",
            "max.poll.interval.ms": 600_000,
            # A short session makes group joins and failover take seconds, not tens of seconds.
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
        self._consumer = Consumer(conf)
        self._batch = _Batch()
        self._consumer.subscribe([self.settings.topic(t) for t in self.topics], on_revoke=self._on_revoke)

    def _on_revoke(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        if len(self._batch):
            try:
                self._flush_once()
            except Exception as exc:  # the next owner re-reads what we could not commit
                log.warning("flush on rebalance failed, batch will be re-read: %s", exc)
        self._batch = _Batch()

    def poll(self, timeout: float = 0.2, stop: threading.Event | None = None) -> None:
        """One iteration: consume what is there, flush the batch when it is full or old."""
        room = max(1, min(500, self.max_batch_events - len(self._batch)))  # records carry many events each
        for msg in self._consumer.consume(num_messages=room, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.stats.last_error = err.str()
                continue
            self._add(str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0), msg.value())
        batch = self._batch
        if len(batch) >= self.max_batch_events or (len(batch) and time.monotonic() - batch.started >= self.max_batch_s):
            self._flush_with_retry(stop)

    def _add(self, topic: str, partition: int, offset: int, value: bytes | None) -> None:
        self.stats.records += 1
        decoded = decode_batch(value)
        self._batch.events.extend(decoded.events)
        for e in decoded.events:
            self._batch.sources[e.event_id] = (topic, partition, offset)
        for r in decoded.rejected:
            self._batch.letters.append(DeadLetter(reason=r.reason, topic=topic, partition=partition, offset=offset, payload=r.payload))
        key = (topic, partition)
        self._batch.offsets[key] = max(offset, self._batch.offsets.get(key, -1))

    def _flush_once(self) -> None:
        batch = self._batch
        letters = list(batch.letters)
        stored = len(batch.events)
        if batch.events:
            for bad in self.writer.write(batch.events):
                topic, partition, offset = batch.sources.get(bad.event.event_id, ("", -1, -1))
                letters.append(DeadLetter(reason=bad.reason, topic=topic, partition=partition, offset=offset,
                                          payload=bad.event.model_dump(mode="json")))
                stored -= 1
        self.dead_letters.write(letters)
        offsets = [TopicPartition(t, p, o + 1) for (t, p), o in batch.offsets.items()]
        if offsets:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        self.stats.events += stored
        self.stats.rejected += len(letters)
        self.stats.batches += 1
        self.stats.last_commit_ts = time.time()
        self._batch = _Batch()

    def _flush_with_retry(self, stop: threading.Event | None = None) -> None:
        paused: list[TopicPartition] = []
        try:
            while True:
                try:
                    self._flush_once()
                    return
                except Exception as exc:
                    self.stats.write_errors += 1
                    self.stats.last_error = f"write failed, retrying: {exc}"
                    log.error("batch write failed (%d events), retrying: %s", len(self._batch.events), exc)
                    if not paused:
                        paused = self._consumer.assignment()
                        self._consumer.pause(paused)
                    if stop is not None and stop.is_set():
                        return
                    self._consumer.consume(num_messages=1, timeout=self.retry_backoff_s)
        finally:
            if paused:
                self._consumer.resume(paused)

    def run(self, stop: threading.Event) -> None:
        """Consume until `stop` is set, then write and commit what is batched."""
        try:
            while not stop.is_set():
                self.poll(stop=stop)
            if len(self._batch):
                self._flush_with_retry(stop)
        finally:
            self.close()

    def lag(self) -> dict[str, int]:
        """Records not yet committed, per topic (a broker round trip: call it rarely)."""
        out: dict[str, int] = {}
        try:
            committed = self._consumer.committed(self._consumer.assignment(), timeout=2)
            for tp in committed:
                _low, high = self._consumer.get_watermark_offsets(tp, timeout=2, cached=False)
                done = tp.offset if tp.offset >= 0 else 0
                out[tp.topic] = out.get(tp.topic, 0) + max(0, high - done)
        except Exception as exc:
            self.stats.last_error = f"lag: {exc}"
        return out

    def close(self) -> None:
        try:
            self._consumer.close()
        except RuntimeError:
            pass
