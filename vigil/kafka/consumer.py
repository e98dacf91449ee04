"""Consuming events: decode -> validate -> batch (size/time) -> write -> commit after the write.

One consumer group over several topics. Each polled record is decoded (the fast path of
`vigil.contract.fastwire`, same decisions as the per-event pydantic path); rejected events
and undecodable records become dead letters. A batch is handed to the `BatchWriter` with
its identity, a `BatchId`: the offset range it covers on each partition. Only once the
batch and its dead letters are durably stored are the offsets committed. With `pipeline`
(the default) a batch is written on a writer thread while the next one is read and decoded
(the engine releases the GIL while it inserts); one batch is in flight at most, and its
commit comes before the next batch is handed over, so crash semantics do not change. A
`Staging` writer is handed the next batch's events once more, on this thread, before it waits
for the one in flight: work that needs no earlier batch is done there, in the time the engine
inserts.

Offload. With an `Offload` (the analyzer's decode process) the records it `claim`s are not
decoded here: a batch's claimed records are handed to it at hand-over, so it decodes them while
the batch before is written, and the batch goes to an `OffloadWriter` with what it decoded. What
it declines (or all of it, when it failed) is decoded here before the write, its rejected events
dead letters; `everything()` gives the whole batch in record order as objects, for a batch the
writer cannot store from the offload's answer as it is. The identities, intents, commits and
retries above do not change.

Exactly once. The writer records the batch's ranges (an intent) before writing and inserts
under a token derived from them. A consumer that is assigned a partition whose latest
intent is not committed (a crash or a failed commit between write and commit) re-cuts that
very batch and hands it over with `first_attempt` set, so the writer can make it a no-op
where the first attempt got through. When it cannot own every partition of that batch (a
rebalance split them) it marks batches over those offsets `recheck`: the writer checks
their event_ids against what is stored.

Commits. An offset is committed only once every record before it on its partition is
written or dead-lettered: batches are committed in the order they were cut, each for its own
ranges only. A stop while a batch's write is retried commits nothing more (what was read after
it may still be written: its re-read is deduplicated). A rebalance while a batch is being retried (its write keeps failing) commits
nothing: the retried batch, the one read after it and the records consumed before the
rebalance are dropped, and the partitions' next owner reads them again from the last
commit (the retried batch's intent tells it how).

Leaving. `close` first waits (bounded) for a group join in flight to be answered
(`vigil.kafka.membership`): a member that closes while joining stalls the embedded broker's group
for minutes.

Errors. A write, dead-letter write or commit that fails with a transient error (the store
or the broker unavailable, a timeout) is retried with exponential backoff, partitions
paused and the group kept alive, and `stats.state` says "retrying" with the error.
Anything else stops the consumer: `ConsumerFailed` is raised out of `poll`/`run` with the
cause, nothing is committed (nor written or committed by the revocation of the `close` that
follows: the batches read after the failed one are left to the next owner), and the owner (the
service) exits non-zero. Events the writer
can never store (valid by the contract, refused by the store) come back from `write` and
become dead letters, so one bad value never stalls the stream.

    VigilError
    ├── ConsumerFailed   a non-transient error stopped the consumer (the cause is chained)
    └── Unreachable (vigil.errors)
        └── OffloadLost  the offload lost a batch's decoded events: retried, decoded here
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from operator import attrgetter
from typing import Any, Protocol, runtime_checkable

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from vigil.contract.fastwire import decode_fast, payload_of
from vigil.contract.hotkinds import Ingestable
from vigil.errors import DeliveryError, Unreachable, VigilError, one_line
from vigil.kafka.admin import client_config
from vigil.kafka.deadletter import DeadLetter, DeadLetterSink, per_record
from vigil.kafka.membership import Membership
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)

Partition = tuple[str, int]


class ConsumerFailed(VigilError):
    """A non-transient error stopped the consumer; nothing of the failed batch was committed."""


class OffloadLost(Unreachable):
    """The offload that decoded a batch's records can no longer give them as objects (its process is gone): the
    batch is retried with every record decoded here."""


@dataclass(frozen=True, kw_only=True)
class Unstorable:
    """An event its writer can never store, whatever the retries, and why."""

    event: Ingestable
    reason: str


@dataclass(frozen=True, kw_only=True, order=True)
class OffsetRange:
    """The records of one partition in a batch: offsets first..last (inclusive)."""

    topic: str
    partition: int
    first: int
    last: int
    first_ts: int = 0  # the first record's Kafka timestamp (ms): a re-created topic's offsets do not collide

    def key(self) -> str:
        return f"{self.topic}:{self.partition}:{self.first}@{self.first_ts}-{self.last}"


@dataclass(frozen=True, kw_only=True)
class BatchId:
    """What a batch is: its offset ranges. Equal ranges, equal token: the writer's insert identity."""

    ranges: tuple[OffsetRange, ...]
    first_attempt: datetime | None = None  # a re-cut of a batch first attempted (its intent recorded) then
    recheck: bool = False  # covers offsets an earlier owner may have stored but this batch cannot re-cut

    @cached_property
    def token(self) -> str:
        return "b1-" + hashlib.sha1("|".join(r.key() for r in sorted(self.ranges)).encode()).hexdigest()


@dataclass(frozen=True, kw_only=True)
class Intent:
    """A batch recorded as about to be written: its full ranges and when."""

    ranges: tuple[OffsetRange, ...]
    at: datetime


class BatchWriter(Protocol):
    def write(self, events: Sequence[Any], batch: BatchId) -> Sequence[Unstorable]:
        """Store the events (`Ingestable`s) durably before returning (writing the same BatchId again stores
        nothing twice); raise while the store fails (`Unreachable` when that is transient); return the
        events that can never be stored."""


@runtime_checkable
class Staging(Protocol):
    """A writer that does part of a batch's work ahead, on the consumer's thread, while the batch before is written
    (with `pipeline`): `stage` needs nothing of earlier batches and changes nothing `write` relies on but its own
    result, which `write` of the same event list uses (and ignores if the list changed after)."""

    def stage(self, events: Sequence[Any]) -> None: ...


class Deferred(Protocol):
    """Records decoded elsewhere (`Offload`): `counts[i]` the events of the i-th, None where it was declined."""

    @property
    def counts(self) -> Sequence[int | None]: ...

    def events(self) -> Sequence[Sequence[Any] | None]:
        """Each record's events as they were decoded (None: declined)."""


class Pending(Protocol):
    def result(self) -> Deferred | None:
        """Wait for the records' decode; None when it failed (the consumer decodes them itself)."""


class Offload(Protocol):
    """Decodes some records away from this process's GIL (the analyzer's decode process). A record it claims is
    decoded there, with the same decisions as `decode_fast`, or declined and decoded here; a batch with claimed
    records goes to an `OffloadWriter`."""

    def claim(self, value: bytes | None) -> int | None:
        """About how many events `value` holds when the offload takes it, else None (decoded here)."""

    def submit(self, values: list[bytes | None]) -> Pending: ...


@runtime_checkable
class OffloadWriter(Protocol):
    def write_offloaded(self, events: Sequence[Any], deferred: Deferred, everything: Any,
                        batch: BatchId) -> Sequence[Unstorable]:
        """`write` of the batch whose records are `events` (decoded here) and `deferred`'s (decoded by the offload);
        `everything()` gives the whole batch's events in record order, for a batch the writer cannot store from
        `deferred` as it is."""


@runtime_checkable
class IntentSource(Protocol):
    """A writer that records each batch's intent before writing it (so a re-read batch can be re-cut)."""

    def intents(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        """The latest intent recorded for each of `partitions` (absent: none)."""


@dataclass(kw_only=True)
class ConsumerStats:
    records: int = 0
    events: int = 0
    rejected: int = 0
    batches: int = 0
    replayed_batches: int = 0
    rechecked_batches: int = 0
    write_errors: int = 0
    decode_s: float = 0.0  # seconds spent decoding records (the consumer thread)
    commit_s: float = 0.0  # seconds spent committing offsets
    state: str = "running"  # running | retrying | failed | stopped
    last_error: str = ""
    last_commit_ts: float = 0.0


@dataclass
class _Batch:
    events: list[Ingestable] = field(default_factory=list)
    records: list[tuple[int, str, int, int]] = field(default_factory=list)  # each record's end in events, its source
    letters: list[DeadLetter] = field(default_factory=list)
    ranges: dict[Partition, list[int]] = field(default_factory=dict)  # -> [first, last, first_ts]
    started: float = field(default_factory=time.monotonic)
    deferred: list[tuple[int, str, int, int, bytes | None]] = field(default_factory=list)  # claimed records: their
    # place in `records` (before the one of that index), source, value
    estimate: int = 0  # the offload's estimate of the claimed records' events
    pending: Pending | None = None
    resolved: bool = False
    own_letters: int | None = None  # the dead letters of the records decoded while consuming (before `_resolve`'s)
    offloaded: Deferred | None = None  # once resolved: what the offload decoded (None: it decoded nothing)
    declined: list[list[Ingestable] | None] = field(default_factory=list)  # per claimed record: decoded here, if so
    here: tuple[list[Ingestable], list[tuple[int, str, int, int]]] | None = None  # resolved: the events decoded here
    _everything: tuple[list[Ingestable], list[tuple[int, str, int, int]]] | None = None

    def __len__(self) -> int:
        return len(self.events) + len(self.letters) + self.estimate

    def forget_offload(self) -> None:
        """Undo `_resolve` and drop the offload's answer: the batch is resolved again with every record decoded
        here."""
        if self.own_letters is not None:
            del self.letters[self.own_letters:]
        self.pending, self.resolved, self.offloaded, self.here, self._everything = None, False, None, None, None
        self.declined = []

    def local(self) -> tuple[list[Ingestable], list[tuple[int, str, int, int]]]:
        """The events decoded in this process (every event unless the offload decoded some), and the records."""
        return self.here if self.here is not None else (self.events, self.records)

    def sources(self) -> dict[str, tuple[str, int, int]]:
        """event_id -> (topic, partition, offset) of the last record that carried it (asked only when the writer
        refuses events: a dead letter names its record)."""
        events, records = self.everything()
        out: dict[str, tuple[str, int, int]] = {}
        start = 0
        for end, topic, partition, offset in records:
            out.update(dict.fromkeys(map(_EVENT_ID, events[start:end]), (topic, partition, offset)))
            start = end
        return out

    def merged(self, claimed: Sequence[Sequence[Any]]) -> tuple[list[Ingestable], list[tuple[int, str, int, int]]]:
        """The events and records of the batch in record order, each claimed record's events from `claimed`."""
        if not self.deferred:
            return self.events, self.records
        events: list[Ingestable] = []
        records: list[tuple[int, str, int, int]] = []
        start, d = 0, 0
        for i in range(len(self.records) + 1):
            while d < len(self.deferred) and self.deferred[d][0] == i:
                _at, topic, partition, offset, _v = self.deferred[d]
                events += claimed[d]
                records.append((len(events), topic, partition, offset))
                d += 1
            if i < len(self.records):
                end, topic, partition, offset = self.records[i]
                events += self.events[start:end]
                records.append((len(events), topic, partition, offset))
                start = end
        return events, records

    def everything(self) -> tuple[list[Ingestable], list[tuple[int, str, int, int]]]:
        """Every event of the batch in record order (the offload's too, as objects), and the records."""
        if self._everything is None:
            if self.offloaded is None:
                self._everything = self.local()
            else:
                theirs = list(self.offloaded.events())
                theirs += [None] * (len(self.declined) - len(theirs))  # claimed after the hand-over: decoded here
                self._everything = self.merged([d if d is not None else (t or [])
                                                for d, t in zip(self.declined, theirs, strict=True)])
        return self._everything


@dataclass
class _Replay:
    intent: Intent
    todo: dict[Partition, int]  # partitions of the batch still being re-read -> its last offset there
    started: float = field(default_factory=time.monotonic)

    def last(self, tp: Partition) -> int | None:
        return next((r.last for r in self.intent.ranges if (r.topic, r.partition) == tp), None)


_EVENT_ID = attrgetter("event_id")
_Raw = tuple[str, int, int, int, bytes | None]  # topic, partition, offset, timestamp, value

_TRANSIENT_KAFKA = {KafkaError._TRANSPORT, KafkaError._TIMED_OUT, KafkaError._ALL_BROKERS_DOWN,
                    KafkaError.REQUEST_TIMED_OUT, KafkaError.COORDINATOR_NOT_AVAILABLE,
                    KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.NETWORK_EXCEPTION, KafkaError.REBALANCE_IN_PROGRESS}


def is_transient(exc: BaseException) -> bool:
    """A failure that retrying later can cure: the store or the broker unreachable or busy, a timeout."""
    if isinstance(exc, Unreachable | DeliveryError | ConnectionError | TimeoutError):
        return True
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        err: KafkaError = exc.args[0]
        return bool(err.retriable()) or err.code() in _TRANSIENT_KAFKA
    return False


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
    offload: Offload | None = None  # decodes the records it claims elsewhere (the writer must be an OffloadWriter)
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
        self._replay: _Replay | None = None
        self._recheck: dict[Partition, int] = {}  # partition -> last offset an earlier owner may have stored
        self._held: list[_Raw] = []  # records read while a replayed batch is completed
        self._paused: set[Partition] = set()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="ingest-write") if self.pipeline else None
        self._inflight: tuple[_Batch, BatchId, Future[tuple[BatchId, int, list[DeadLetter]]]] | None = None
        self._retrying = False  # a batch's write is failing: nothing read after it may be committed
        self._rebalances = 0  # revocations seen: records consumed before one are stale
        self._revoked = False  # the partitions were revoked while it was: it is left to their next owner
        self._unwritten = False  # stopped while a batch's write was retried, or failed: nothing more is committed
        self._membership = Membership()  # a close while joining waits for the join (`vigil.kafka.membership`)
        self._consumer.subscribe([self.settings.topic(t) for t in self.topics],
                                 on_assign=self._membership.assigned(self._on_assign),
                                 on_revoke=self._membership.revoked(self._on_revoke))

    # ------------------------------------------------------------------ group membership
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        tps = [(str(tp.topic), int(tp.partition)) for tp in partitions]
        if not tps or not isinstance(self.writer, IntentSource) or self._membership.closing:
            return  # (assigned while closing: nothing is read for it)
        try:
            intents = self.writer.intents(tps)
            committed = {(str(tp.topic), int(tp.partition)): int(tp.offset)
                         for tp in consumer.committed(partitions, timeout=10)} if intents else {}
        except Exception as exc:  # cannot tell what an earlier owner left: re-check what it may have
            log.warning("reading intents on assignment failed, re-checking recent offsets: %s", one_line(exc))
            self.stats.last_error = f"intents: {one_line(exc)}"
            self._recheck.update({tp: 2**63 - 1 for tp in tps})  # until the first commit passes them
            return
        for part in partitions:  # never committed: reading starts at the log's start (auto.offset.reset=earliest)
            key = (str(part.topic), int(part.partition))
            if key in intents and committed.get(key, -1) < 0 and self.from_beginning:
                committed[key] = int(consumer.get_watermark_offsets(part, timeout=10)[0])
        owned = set(tps)
        pending: dict[tuple[OffsetRange, ...], Intent] = {}
        for tp, intent in intents.items():
            rng = next(r for r in intent.ranges if (r.topic, r.partition) == tp)
            if committed.get(tp, -1) <= rng.last:  # written (maybe), never committed
                pending[intent.ranges] = intent
        for intent in pending.values():
            ours = all((r.topic, r.partition) in owned and committed.get((r.topic, r.partition)) == r.first
                       for r in intent.ranges)
            if ours and self._replay is None:
                self._replay = _Replay(intent=intent, todo={(r.topic, r.partition): r.last for r in intent.ranges})
                log.info("re-cutting an uncommitted batch of %d partition(s) first recorded at %s",
                         len(intent.ranges), intent.at.isoformat())
            else:
                for r in intent.ranges:
                    if (r.topic, r.partition) in owned:
                        self._recheck[(r.topic, r.partition)] = max(r.last, self._recheck.get((r.topic, r.partition), -1))

    def _on_revoke(self, _consumer: Consumer, _partitions: list[TopicPartition]) -> None:
        self._rebalances += 1
        if self._retrying:  # an earlier batch is unwritten: committing the current one would skip it
            self._revoked = True
            log.warning("partitions revoked while a batch write is retried: it and %d record(s) after it are "
                        "left to the next owner", len(self._batch))
        self._abandon_replay()
        try:
            if not self._unwritten:  # after a failure nothing is written or committed here: the next owner reads it
                self._reap(None, wait=True)
                if len(self._batch) and not self._retrying:
                    self._commit(*self._store_taken(None))
        except Exception as exc:  # the next owner re-reads what we could not commit (its intent says how)
            log.warning("flush on rebalance failed, batch will be re-read: %s", one_line(exc))
            if self.stats.state == "failed":  # (`_flush_with_retry` said so) the consumer goes on: it is not stopped
                self.stats.state = "running"
                self.stats.last_error = f"rebalance: a batch's write failed, left to the next owner: {one_line(exc)}"
        self._batch = _Batch()
        self._replay = None
        self._held.clear()
        self._paused.clear()
        self._recheck.clear()

    # ------------------------------------------------------------------ consuming
    def poll(self, timeout: float = 0.2, stop: threading.Event | None = None) -> None:
        """One iteration: consume what is there, flush the batch when it is full, old, or a completed re-cut."""
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
        self._unwritten = True

    def _poll(self, timeout: float, stop: threading.Event | None) -> None:
        per_record = max(1, self.stats.events // max(1, self.stats.records)) if self.stats.batches else 1
        room = max(1, min(500, (self.max_batch_events - len(self._batch)) // per_record))  # records carry many events
        rebalances = self._rebalances
        for msg in self._consumer.consume(num_messages=room, timeout=timeout):
            if self._rebalances != rebalances:  # revoked while handing over: the rest is re-read from the commits
                break
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    self.stats.last_error = err.str()
                continue
            self._route((str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0),
                         int(msg.timestamp()[1]), msg.value()))
            if self._replay is None and len(self._batch) >= self.max_batch_events:
                self._hand_over(stop)  # full: the rest of what was consumed starts the next batch
        self._reap(stop)
        replay = self._replay
        if replay is not None:
            if time.monotonic() - replay.started > self.replay_timeout_s:
                log.warning("re-cut batch incomplete after %.0f s: writing it as a re-check", self.replay_timeout_s)
                self._abandon_replay()
            elif not replay.todo:
                self._reap(stop, wait=True)
                self._flush_with_retry(stop, *self._take(replay))
                self._after_replay()
                return
            else:
                return
        batch = self._batch
        if len(batch) >= self.max_batch_events or (len(batch) and time.monotonic() - batch.started >= self.max_batch_s):
            self._hand_over(stop)

    def _hand_over(self, stop: threading.Event | None) -> None:
        """Write the current batch: on the writer thread when pipelined, else here (with retries)."""
        self._submit(self._batch)  # the offload decodes it while the batch before is written
        if self._pool is not None and self._inflight is not None and isinstance(self.writer, Staging):
            self.writer.stage(self._batch.events)  # while the batch before is written
        self._reap(stop, wait=True)  # one batch in flight at most: its commit comes before the next write
        taken, bid = self._take(None)
        if self._pool is not None:
            self._inflight = (taken, bid, self._pool.submit(self._store, taken, bid))
        else:
            self._flush_with_retry(stop, taken, bid)

    def _route(self, raw: _Raw) -> None:
        replay = self._replay
        if replay is not None:
            tp = (raw[0], raw[1])
            last = replay.last(tp)
            if last is None or raw[2] > last:  # not part of the batch being re-cut: hold it until that is written
                self._held.append(raw)
                replay.todo.pop(tp, None)
                if tp not in self._paused:
                    self._consumer.pause([TopicPartition(tp[0], tp[1])])
                    self._paused.add(tp)
                return
            if raw[2] == last:
                replay.todo.pop(tp, None)
        self._add(raw)

    def _add(self, raw: _Raw) -> None:
        topic, partition, offset, ts, value = raw
        self.stats.records += 1
        claimed = self.offload.claim(value) if self.offload is not None else None
        if claimed is not None:
            self._batch.deferred.append((len(self._batch.records), topic, partition, offset, value))
            self._batch.estimate += claimed
        else:
            self._batch.events.extend(self._decode(value, topic, partition, offset, self._batch.letters))
            self._batch.records.append((len(self._batch.events), topic, partition, offset))
        rng = self._batch.ranges.get((topic, partition))
        if rng is None:
            self._batch.ranges[(topic, partition)] = [offset, offset, ts]
        else:
            rng[0], rng[1] = min(rng[0], offset), max(rng[1], offset)

    def _take(self, replay: _Replay | None) -> tuple[_Batch, BatchId]:
        """The current batch and its identity; a new batch starts."""
        batch = self._batch
        if replay is not None:
            bid = BatchId(ranges=replay.intent.ranges, first_attempt=replay.intent.at)
        else:
            ranges = tuple(sorted(OffsetRange(topic=t, partition=p, first=f, last=la, first_ts=ts)
                                  for (t, p), (f, la, ts) in batch.ranges.items()))
            recheck = any(r.first <= self._recheck.get((r.topic, r.partition), -1) for r in ranges)
            bid = BatchId(ranges=ranges, recheck=recheck)
        self._batch = _Batch()
        self._submit(batch)
        return batch, bid

    def _decode(self, value: bytes | None, topic: str, partition: int, offset: int,
                letters: list[DeadLetter]) -> list[Ingestable]:
        """A record's events, decoded here; its rejected events go to `letters`, naming the record."""
        t = time.perf_counter()
        decoded = decode_fast(value)
        self.stats.decode_s += time.perf_counter() - t
        letters.extend(per_record(((r.reason, r.payload) for r in decoded.rejected), topic=topic,
                                  partition=partition, offset=offset))  # bounded: the first K, then a summary
        return decoded.events

    def _submit(self, batch: _Batch) -> None:
        """Hand the batch's claimed records to the offload (once)."""
        if self.offload is not None and batch.deferred and batch.pending is None:
            batch.pending = self.offload.submit([d[4] for d in batch.deferred])

    def _resolve(self, batch: _Batch) -> None:
        """Once per batch, before its first write: the offload's answer; the records it declined (or all of them,
        when it failed) decoded here, their rejected events dead letters."""
        if batch.resolved:
            return
        if not batch.deferred:
            batch.resolved = True
            return
        if batch.own_letters is None:
            batch.own_letters = len(batch.letters)
        del batch.letters[batch.own_letters:]  # a resolve that raised half-way starts again
        result = batch.pending.result() if batch.pending is not None else None
        counts = list(result.counts) if result is not None else []
        counts += [None] * (len(batch.deferred) - len(counts))  # records added after the hand-over: decoded here
        batch.declined = [None if count is not None else self._decode(value, topic, partition, offset, batch.letters)
                          for (_at, topic, partition, offset, value), count in zip(batch.deferred, counts, strict=True)]
        batch.offloaded = result if result is not None and any(c is not None for c in counts) else None
        if any(d is not None for d in batch.declined):
            batch.here = batch.merged([d or [] for d in batch.declined])
        batch.resolved = True

    def _store(self, batch: _Batch, bid: BatchId) -> tuple[BatchId, int, list[DeadLetter]]:
        """Write the batch and its dead letters (on the writer thread when pipelined); nothing is committed."""
        self._resolve(batch)
        letters = list(batch.letters)
        events, _records = batch.local()
        offloaded = batch.offloaded
        stored = len(events) + (sum(c for c in offloaded.counts if c is not None) if offloaded is not None else 0)
        if stored:
            if offloaded is not None and isinstance(self.writer, OffloadWriter):
                try:
                    bads: Sequence[Unstorable] = self.writer.write_offloaded(events, offloaded,
                                                                             lambda: batch.everything()[0], bid)
                except OffloadLost:
                    batch.forget_offload()  # the retry decodes every record here
                    raise
            else:
                bads = self.writer.write(batch.everything()[0], bid)
            sources = batch.sources() if bads else {}
            for bad in bads:
                topic, partition, offset = sources.get(bad.event.event_id, ("", -1, -1))
                letters.append(DeadLetter(reason=bad.reason, topic=topic, partition=partition, offset=offset,
                                          payload=payload_of(bad.event)))
                stored -= 1
        self.dead_letters.write(letters)
        return bid, stored, letters

    def _store_taken(self, replay: _Replay | None) -> tuple[BatchId, int, list[DeadLetter]]:
        return self._store(*self._take(replay))

    def _commit(self, bid: BatchId, stored: int, letters: list[DeadLetter]) -> None:
        if self._unwritten:  # an earlier batch was left unwritten at a stop: the next owner reads from its offsets
            return
        offsets = [TopicPartition(r.topic, r.partition, r.last + 1) for r in bid.ranges]
        t = time.perf_counter()
        if offsets:
            self._consumer.commit(offsets=offsets, asynchronous=False)
        self.stats.commit_s += time.perf_counter() - t
        for r in bid.ranges:  # offsets past an earlier owner's uncommitted batch need no re-check
            if self._recheck.get((r.topic, r.partition), -1) <= r.last:
                self._recheck.pop((r.topic, r.partition), None)
        self.stats.events += stored
        self.stats.rejected += sum(letter.count for letter in letters)
        self.stats.batches += 1
        self.stats.replayed_batches += bid.first_attempt is not None
        self.stats.rechecked_batches += bid.recheck
        self.stats.last_commit_ts = time.time()
        self.stats.state = "running"

    def _reap(self, stop: threading.Event | None, wait: bool = False) -> None:
        """Commit the batch in flight once written (waiting for it with `wait`); a failed one is retried here."""
        if self._inflight is None:
            return
        batch, bid, fut = self._inflight
        if not wait and not fut.done():
            return
        self._inflight = None
        try:
            self._commit(*fut.result())
        except Exception as exc:
            self._flush_with_retry(stop, batch, bid, failed=exc)

    def _abandon_replay(self) -> None:
        """Give up re-cutting (partitions lost, records gone): what was read is re-checked instead."""
        if self._replay is None:
            return
        for r in self._replay.intent.ranges:
            tp = (r.topic, r.partition)
            self._recheck[tp] = max(r.last, self._recheck.get(tp, -1))
        self._after_replay()

    def _after_replay(self) -> None:
        self._replay = None
        if self._paused:
            self._consumer.resume([TopicPartition(t, p) for t, p in self._paused])
            self._paused.clear()
        held, self._held = self._held, []
        for raw in held:
            self._add(raw)

    def _flush_with_retry(self, stop: threading.Event | None, batch: _Batch, bid: BatchId,
                          failed: Exception | None = None) -> None:
        """Store and commit `batch`, retrying transient failures (the same BatchId: a no-op where it got through)."""
        paused: list[TopicPartition] = []
        backoff = self.retry_backoff_s
        self._retrying, self._revoked = True, False
        try:
            while True:
                try:
                    if failed is not None:
                        exc, failed = failed, None
                        raise exc
                    if self._revoked:  # its partitions went to a rebalance: their next owner reads it again
                        self.stats.state = "running"
                        break
                    self._commit(*self._store(batch, bid))
                    break
                except Exception as exc:
                    self.stats.write_errors += 1
                    if not is_transient(exc):
                        self.stats.state = "failed"
                        self.stats.last_error = f"stopped: {one_line(exc)}"
                        log.error("batch write failed (%d events), stopping: %s", len(batch), exc)
                        raise ConsumerFailed(f"ingest stopped: {one_line(exc)}") from exc
                    self.stats.state = "retrying"
                    self.stats.last_error = f"retrying in {backoff:.1f} s: {one_line(exc)}"
                    log.warning("batch write failed (%d events), retrying in %.1f s: %s",
                                len(batch), backoff, one_line(exc))
                    if not paused:
                        paused = self._consumer.assignment()
                        self._consumer.pause(paused)
                    if stop is not None and stop.is_set():
                        self._unwritten = True  # stopped with it unwritten: no later batch may be committed
                        return
                    for msg in self._consumer.consume(num_messages=100, timeout=backoff):  # keeps the group alive
                        if msg.error() is None:  # (only from a partition assigned meanwhile) kept for later
                            self._held.append((str(msg.topic()), int(msg.partition() or 0), int(msg.offset() or 0),
                                               int(msg.timestamp()[1]), msg.value()))
                    backoff = min(self.max_backoff_s, backoff * 2)
        finally:
            self._retrying = False
            if paused:  # (harmless for partitions a rebalance took away)
                self._consumer.resume(paused)
        if self._held and self._replay is None:
            self._after_replay()

    def run(self, stop: threading.Event) -> None:
        """Consume until `stop` is set, then write and commit what is batched; ConsumerFailed on a fatal error."""
        try:
            while not stop.is_set():
                self.poll(stop=stop)
            self._reap(stop, wait=True)
            if len(self._batch) and self._replay is None:
                self._flush_with_retry(stop, *self._take(None))
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
        if self._pool is not None:
            self._pool.shutdown(wait=True)
        try:
            self._membership.settle(self._consumer, self.settings.topic(self.topics[0]) if self.topics else None)
            self._consumer.close()
        except RuntimeError:
            pass
