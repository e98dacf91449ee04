"""Consuming events: the source of a chain of steps, decode -> accumulate (size/time) -> write -> commit.

One consumer group over several topics. The processing is a chain of arroyo-style steps (`vigil.kafka.steps`,
listed in `vigil.kafka.steps.chain`; each module says what it guarantees): records are decoded (rejects dead-lettered
with their reason and record), batched by size and age (bounded memory), written with their `BatchId` on a writer
thread, one batch in flight (backpressure), and their offsets committed only once written, in the order batches
were cut. A `Staging` writer stages the next batch meanwhile; an owner's chain may list steps of its own (the
analyzer's offload and intent ledger). `BatchingConsumer` feeds the chain and owns what needs the group:

Exactly once. The batch's ranges (an intent) are recorded before it is written (by the chain's intent step, the
analyzer's, or by a writer that records them itself: `Chain.intents`), and the writer inserts under a token derived
from them. A consumer assigned a partition whose latest intent is not committed re-cuts that very batch and hands
it over with `first_attempt` set, or marks the batches over those offsets `recheck` (`vigil.kafka.recut`).

Retries (`vigil.kafka.retry`). A write, dead-letter write or commit that fails transiently is retried with backoff,
partitions paused and the group kept alive, `stats.state` "retrying". Anything else raises `ConsumerFailed` out of
`poll`/`run`: nothing more is written or committed (nor by the revocation of the `close` that follows), and the
owner (the service) exits non-zero. A stop while a batch is retried commits nothing more (what was read after it
may still be written: its re-read is deduplicated).

Rebalances. A revocation writes and commits what is batched, unless a batch is being retried: then nothing is
committed (the retried batch, the one read after it and the records consumed before are dropped; the partitions'
next owner reads them again from the last commit, the retried batch's intent telling it how). Assignments, re-cuts
and the records held meanwhile are `vigil.kafka.regroup`'s.

Leaving. `close` first waits (bounded) for a group join in flight to be answered (`vigil.kafka.membership`): a
member that closes while joining stalls the embedded broker's group for minutes.

    VigilError
    ├── ConsumerFailed   a non-transient error stopped the consumer (the cause is chained; vigil.kafka.failures)
    └── Unreachable (vigil.errors)
        └── OffloadLost  the offload lost a batch's decoded events: retried, decoded here
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from vigil.errors import one_line
from vigil.kafka.admin import client_config
from vigil.kafka.batch import Batch
from vigil.kafka.batchid import BatchId, Intent, OffsetRange, Partition, Unstorable
from vigil.kafka.deadletter import DeadLetterSink
from vigil.kafka.failures import ConsumerFailed, OffloadLost, is_transient
from vigil.kafka.membership import Membership
from vigil.kafka.ports import BatchWriter, Deferred, IntentSource, Offload, OffloadWriter, Pending, Staging
from vigil.kafka.recut import Recut
from vigil.kafka.regroup import Regroup
from vigil.kafka.retry import Retry
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.chain import ChainFactory, Ports, default
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)

__all__ = ["BatchId", "BatchWriter", "BatchingConsumer", "ConsumerFailed", "ConsumerStats", "Deferred", "Intent",
           "IntentSource", "Offload", "OffloadLost", "OffloadWriter", "OffsetRange", "Partition", "Pending",
           "Staging", "Unstorable", "is_transient"]


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
    retry_backoff_s: float = 0.5
    max_backoff_s: float = 30.0
    replay_timeout_s: float = 60.0
    pipeline: bool = True  # write a batch on a thread of its own while the next one is read and decoded
    chain: ChainFactory = default  # the steps, given the consumer's ports (`vigil.kafka.steps.chain`)
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
        self._chain = self.chain(Ports(
            stats=self.stats, writer=self.writer, dead_letters=self.dead_letters, max_events=self.max_batch_events,
            max_s=self.max_batch_s, pipeline=self.pipeline,
            commit=lambda offsets: self._consumer.commit(offsets=offsets, asynchronous=False),
            retry=lambda batch, bid, exc: self._flush_with_retry(self._stop, batch, bid, failed=exc)))
        self._stop: threading.Event | None = None  # the one of the poll or run in progress (None: a revocation)
        self._regroup = Regroup(consumer=self._consumer, chain=self._chain, stats=self.stats,
                                from_beginning=self.from_beginning)  # re-cuts and held records (`vigil.kafka.regroup`)
        self._retry = Retry(stats=self.stats, backoff_s=self.retry_backoff_s, max_backoff_s=self.max_backoff_s)
        self._retry_paused: list[TopicPartition] = []
        self._membership = Membership()  # a close while joining waits for the join (`vigil.kafka.membership`)
        self._consumer.subscribe([self.settings.topic(t) for t in self.topics],
                                 on_assign=self._membership.assigned(self._on_assign),
                                 on_revoke=self._membership.revoked(self._on_revoke))

    def __setattr__(self, name: str, value: Any) -> None:
        """A writer swapped after the start (as the old class read it at each batch) is the chain's from the next."""
        super().__setattr__(name, value)
        if name == "writer" and "_chain" in self.__dict__:
            self._chain.use(value)

    @property
    def _replay(self) -> Recut | None:
        return self._regroup.replay

    @property
    def _batch(self) -> Batch:
        return self._chain.accumulate.batch

    def _cut(self, replay: Recut | None) -> tuple[Batch, BatchId]:
        """The batch being accumulated and its identity (a re-cut's: its intent's); a new batch starts."""
        batch = self._chain.accumulate.take()
        self._chain.ready(batch)
        if replay is not None:
            return batch, BatchId(ranges=replay.intent.ranges, first_attempt=replay.intent.at)
        return batch, batch.identity(self._chain.commit.recheck)

    # ------------------------------------------------------------------ group membership
    def _on_assign(self, _consumer: Consumer, partitions: list[TopicPartition]) -> None:
        if not self._membership.closing:  # (assigned while closing: nothing is read for it)
            self._regroup.assigned(partitions)

    def _on_revoke(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        self.stats.rebalances += 1
        if self._retry.retrying:  # an earlier batch is unwritten: committing the current one would skip it
            self._retry.revoked = True
            log.warning("partitions revoked while a batch write is retried: it and %d record(s) after it are "
                        "left to the next owner", len(self._batch))
        self._regroup.abandon()
        stop, self._stop = self._stop, None
        try:
            if not self._chain.commit.stopped:  # after a failure nothing is written or committed here
                self._chain.write.join()
                if len(self._batch) and not self._retry.retrying:
                    self._chain.commit.submit(self._chain.handle(*self._cut(None)))
        except Exception as exc:  # the next owner re-reads what we could not commit (its intent says how)
            log.warning("flush on rebalance failed, batch will be re-read: %s", one_line(exc))
            if self.stats.state == "failed":  # (`_flush_with_retry` said so) the consumer goes on: it is not stopped
                self.stats.state = "running"
                self.stats.last_error = f"rebalance: a batch's write failed, left to the next owner: {one_line(exc)}"
        finally:
            self._stop = stop
        self._regroup.revoked()

    # ------------------------------------------------------------------ consuming
    def poll(self, timeout: float = 0.2, stop: threading.Event | None = None) -> None:
        """One iteration: consume what is there, flush the batch when it is full, old, or a completed re-cut."""
        self._stop = stop
        try:
            self._poll(timeout, stop)
        except Exception:  # ConsumerFailed, or a bug: the owner stops the consumer
            self._stopped_failing()
            raise

    def _stopped_failing(self) -> None:
        """An error leaves the consumer (ConsumerFailed, or a bug): nothing more is written or committed, not even by the
        revocation of the `close` that follows (it would commit the batches read after a failed one past it; what
        was read is the next owner's to read again). A failure that a revocation catches (its partitions' next owner
        re-reads the batch) does not come here: the consumer goes on."""
        self._chain.commit.stopped = True

    def _poll(self, timeout: float, stop: threading.Event | None) -> None:
        per_record = max(1, self.stats.events // max(1, self.stats.records)) if self.stats.batches else 1
        room = max(1, min(500, (self.max_batch_events - len(self._batch)) // per_record))  # records carry many events
        rebalances = self.stats.rebalances
        for msg in self._consumer.consume(num_messages=room, timeout=timeout):
            if self.stats.rebalances != rebalances:  # revoked while handing over: the rest is re-read from the commits
                break
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.stats.last_error = err.str()
                continue
            raw = (str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0), int(msg.timestamp()[1]),
                   msg.value())
            self._regroup.route(raw)  # a full batch is cut there: the rest starts the next
        self._chain.write.poll()
        replay = self._replay
        if replay is not None:
            if time.monotonic() - replay.started > self.replay_timeout_s:
                log.warning("re-cut batch incomplete after %.0f s: writing it as a re-check", self.replay_timeout_s)
                self._regroup.abandon()
            elif not replay.todo:
                self._chain.write.join()
                self._flush_with_retry(stop, *self._cut(replay))
                self._regroup.release()
                return
            else:
                return
        self._chain.accumulate.poll()  # full or old: cut and handed to the write

    def _flush_with_retry(self, stop: threading.Event | None, batch: Batch, bid: BatchId,
                          failed: Exception | None = None) -> None:
        """Store and commit `batch`, retrying transient failures (`vigil.kafka.retry`)."""
        if not self._retry.attempt(lambda: self._chain.commit.submit(self._chain.handle(batch, bid)), len(batch),
                                   self, stop, failed):
            self._chain.commit.stopped = True  # stopped with it unwritten: no later batch may be committed
            return
        if self._regroup.held and self._replay is None:
            self._regroup.release()

    # ------------------------------------------------------------------ `Idle`: the group kept alive while retrying
    def pause(self) -> bool:
        self._retry_paused = self._consumer.assignment()
        if self._retry_paused:
            self._consumer.pause(self._retry_paused)
        return bool(self._retry_paused)

    def keep_alive(self, timeout: float) -> None:
        for msg in self._consumer.consume(num_messages=100, timeout=timeout):
            if msg.error() is None:  # (only from a partition assigned meanwhile) kept for later
                self._regroup.held.append((str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0),
                                   int(msg.timestamp()[1]), msg.value()))

    def resume(self) -> None:
        self._consumer.resume(self._retry_paused)

    def run(self, stop: threading.Event) -> None:
        """Consume until `stop` is set, then write and commit what is batched; ConsumerFailed on a fatal error."""
        try:
            while not stop.is_set():
                self.poll(stop=stop)
            self._stop = stop
            self._chain.write.join()
            if len(self._batch) and self._replay is None:
                self._flush_with_retry(stop, *self._cut(None))
            self.stats.state = "stopped"
        except Exception:
            self._stopped_failing()
            raise
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
        self._chain.close()
        try:
            self._membership.settle(self._consumer, self.settings.topic(self.topics[0]) if self.topics else None)
            self._consumer.close()
        except RuntimeError:
            pass
