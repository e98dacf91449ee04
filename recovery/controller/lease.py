"""One active controller per cluster: a lease held through a Kafka consumer group.

Every controller joins the group `<topic prefix><lease_group>` on the one-partition topic
`recovery-lease`; the group gives that partition to exactly one live member, and that member
leads. A leader that dies stops heartbeating and the group hands the partition to another
member after the session timeout (6 s); a new member joining may also move it (the eager
protocol revokes it from the old leader before anyone else gets it). Standbys fold the log
all the time, so a new leader acts as soon as it holds the lease. `poll()` must be called
often (the service's lease thread): assignment callbacks run inside it.

Each time an instance takes the lease it appends a claim record to the lease topic and leads
with `epoch` = that record's offset + 1: epochs grow in log order, never from a clock, and every
command and step the leader publishes carries its epoch, so agents refuse the older epochs of a
deposed leader (`vigil.signing.gate`). An instance that cannot write its claim does not lead.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from vigil.kafka.admin import client_config, ensure_topics
from vigil.kafka.membership import Membership
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)
LEASE_TOPIC = "recovery-lease"


@dataclass(kw_only=True)
class Lease:
    settings: VigilSettings
    bootstrap: str
    group: str
    session_timeout_ms: int = 6000
    changes: int = field(default=0, init=False)
    epoch: int = field(default=0, init=False)
    _held: bool = field(default=False, init=False)
    _leading: threading.Event = field(default_factory=threading.Event, init=False)

    def __post_init__(self) -> None:
        ensure_topics(self.settings, self.bootstrap, [LEASE_TOPIC], partitions=1)
        conf: dict[str, Any] = {
            **client_config(self.settings, self.bootstrap),
            "group.id": f"{self.settings.topic_prefix}{self.group}",
            "enable.auto.commit": False,
            "session.timeout.ms": self.session_timeout_ms,
            "heartbeat.interval.ms": 500,
            "max.poll.interval.ms": 300_000,
        }
        self._consumer = Consumer(conf)
        self._producer = Producer({**client_config(self.settings, self.bootstrap), "acks": "all"})
        self._membership = Membership()  # a close while joining waits for the join: see `close`
        self._consumer.subscribe([self.settings.topic(LEASE_TOPIC)], on_assign=self._membership.assigned(self._assigned),
                                 on_revoke=self._membership.revoked(self._revoked),
                                 on_lost=self._membership.revoked(self._revoked))

    @property
    def leading(self) -> bool:
        return self._leading.is_set()

    def _assigned(self, _c: Consumer, parts: list[TopicPartition]) -> None:
        if self._membership.closing:  # assigned while leaving: never claims
            return
        self._held = self._held or bool(parts)
        if parts and not self._leading.is_set():
            epoch = self._claim()
            if epoch is None:
                return
            self.epoch = epoch
            self._leading.set()
            self.changes += 1
            log.info("recovery controller: took the lease, now leading (epoch %d)", epoch)

    def _claim(self) -> int | None:
        """Append a claim to the lease topic; its offset + 1, or None when it could not be written."""
        got: list[int] = []

        def done(err: KafkaError | None, msg: Message) -> None:
            offset = msg.offset()
            if err is None and offset is not None:
                got.append(offset)

        self._producer.produce(self.settings.topic(LEASE_TOPIC), value=b"claim", key=self.group.encode(),
                               on_delivery=done)
        self._producer.flush(10)
        if not got:
            log.warning("recovery controller: could not write its lease claim; not leading")
            return None
        return got[0] + 1

    def _revoked(self, _c: Consumer, _parts: list[TopicPartition]) -> None:
        self._held = False
        if self._leading.is_set():
            self._leading.clear()
            self.changes += 1
            log.info("recovery controller: lost the lease, standing by")

    def poll(self, timeout: float = 0.5) -> None:
        self._consumer.poll(timeout)
        if self._held and not self._leading.is_set():  # the claim failed: try again
            self._assigned(self._consumer, [TopicPartition(self.settings.topic(LEASE_TOPIC), 0)])

    def close(self) -> None:
        """Leave the group (after the lease thread stopped polling). A join in flight is answered first: on the
        embedded broker a member that leaves while joining holds every other member's rebalance, the standby's
        takeover included, for minutes (`vigil.kafka.membership`)."""
        self._leading.clear()
        self._producer.flush(5)
        try:
            self._membership.settle(self._consumer, self.settings.topic(LEASE_TOPIC))
            self._consumer.close()
        except RuntimeError:
            pass
