"""A detect shard's share of the jobs: the consumer group `vigil-detect` over the `detect-jobs` topic's partitions.

Every detecting analyzer started with `detect_shards` on joins the group; Kafka's assignment gives each partition
(`shard.partition_of`: the jobs keyed to it) to exactly one live member, so each job is judged by one shard at a
time. A member that dies stops heartbeating and the group hands its partitions to the others after the session
timeout (6 s); a member joining moves some (the eager protocol revokes before it assigns, so no partition is ever
held by two members at once).

Handover: a revocation waits on `turn_lock`, which the detect loop holds for a whole turn, its publishing and the
saving of its positions, so the shard releases a job only after its alerts are on the topic and its position is
stored; the next owner's cursor (`LiveCursor.owner`) then goes on from that position and the service restores the
gained jobs' alert and incident books from their topics. A shard killed mid-catch-up leaves the instants of its
last turn unsaved (its rounds possibly published): the next owner restores the alert book as of the saved
positions, judges them again and publishes nothing twice (an alert's event id is its fingerprint, status and
instant). `poll()` must be called often (the callbacks run in
it); `close()` settles a join in flight first (`vigil.kafka.membership`). The detect loop never reads the topic:
membership is what it is for; `report()` (the detect thread) writes each owned partition a lease record for
`vigil status` (analyzer/shardreport.py) and `poll()` (the group's thread: the consumer is driven from that one
thread, a commit from another blocked behind its poll) commits its offset as the group's pointer to it.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from vigil.analyzer.shard import DETECT_GROUP, DETECT_TOPIC, Ownership
from vigil.analyzer.shardreport import SHOWN_JOBS, ShardReport
from vigil.kafka.admin import client_config, ensure_topics
from vigil.kafka.membership import Membership
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class ShardGroup:
    settings: VigilSettings
    bootstrap: str
    owner: Ownership
    turn_lock: threading.Lock
    group: str = DETECT_GROUP
    session_timeout_ms: int = 6000
    report_every_s: float = 10.0
    name: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}")
    _membership: Membership = field(default_factory=Membership, init=False)

    def __post_init__(self) -> None:
        ensure_topics(self.settings, self.bootstrap, [DETECT_TOPIC], partitions=self.owner.partitions)
        conf: dict[str, Any] = {
            **client_config(self.settings, self.bootstrap),
            "group.id": f"{self.settings.topic_prefix}{self.group}",
            "enable.auto.commit": False,
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 300_000,
            "partition.assignment.strategy": "roundrobin",
        }
        self._consumer = Consumer(conf)
        self.topic = self.settings.topic(DETECT_TOPIC)
        meta = self._consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
        found = len(meta.partitions) if meta is not None else 0
        if found != self.owner.partitions:  # jobs would map to partitions no member owns, or to several
            self._consumer.close()
            raise ValueError(f"{self.topic} has {found} partitions, detect_partitions is {self.owner.partitions}: "
                             "every detect shard must use the topic's count")
        self._producer = Producer({**client_config(self.settings, self.bootstrap), "linger.ms": 0})
        self._lock = threading.Lock()
        self._pending: dict[int, int] = {}  # lease records written, their offsets not committed yet
        self._reported: tuple[int, float] = (-1, 0.0)  # the ownership change and wall time last reported
        self._consumer.subscribe([self.topic], on_assign=self._membership.assigned(self._assigned),
                                 on_revoke=self._membership.revoked(self._revoked),
                                 on_lost=self._membership.revoked(self._lost))

    def _assigned(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        if self._membership.closing:
            return
        with self.turn_lock:
            self.owner.assign(p.partition for p in parts)
        log.info("detect shard: owns partitions %s", sorted(p.partition for p in parts))

    def _revoked(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        with self.turn_lock:  # the turn in progress is published and saved first
            self.owner.revoke(p.partition for p in parts)

    def _lost(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        self.owner.revoke(p.partition for p in parts)  # already someone else's: stop at the next turn

    def poll(self, timeout: float = 0.5) -> None:
        """Serve the group's callbacks, and commit the offsets of the lease records `report()` wrote."""
        with self._lock:
            pending, self._pending = self._pending, {}
        if pending and self.owner.owned:
            try:
                self._consumer.commit(offsets=[TopicPartition(self.topic, p, off) for p, off in pending.items()],
                                      asynchronous=True)
            except KafkaException as exc:  # revoked meanwhile: the next owner's records say who holds it
                log.info("detect shard: committing its lease records: %s", exc)
        self._consumer.poll(timeout)

    def report(self, *, turn_at: float, behind_s: float, backlog: int, jobs: list[str], force: bool = False) -> bool:
        """Write this shard's lease record to each owned partition and commit it there (throttled); True if written.

        Called by the detect loop after a turn's positions are saved; a failure is logged, never raised (a view).
        """
        owned, changed, now = self.owner.owned, self.owner.changed, time.time()
        if not owned or (not force and self._reported[0] == changed and now - self._reported[1] < self.report_every_s):
            return False
        rec = ShardReport(shard=self.name, partitions=sorted(owned), jobs=jobs[:SHOWN_JOBS], jobs_total=len(jobs),
                          turn_at=turn_at, behind_s=round(behind_s, 1), backlog=backlog, at=now).encode()
        offsets: dict[int, int] = {}

        def done(err: Any, msg: Any) -> None:
            if err is None:
                offsets[int(msg.partition())] = int(msg.offset())

        try:
            for p in sorted(owned):
                self._producer.produce(self.topic, value=rec, key=self.name.encode(), partition=p, on_delivery=done)
            self._producer.flush(10)
            with self._lock:  # committed by the polling thread: a consumer is driven from one thread only
                self._pending.update(offsets)
        except (KafkaException, BufferError) as exc:  # revoked meanwhile, or the broker away: the next turn retries
            log.info("detect shard: reporting to %s: %s", self.topic, exc)
            return False
        self._reported = (changed, now)
        return True

    def close(self) -> None:
        """Leave the group (after the polling thread stopped); the others take the partitions at once."""
        with self.turn_lock:
            self.owner.revoke(range(self.owner.partitions))
        try:
            self._membership.settle(self._consumer, self.topic)
            self._consumer.close()
            self._producer.flush(5)
        except RuntimeError:
            pass
