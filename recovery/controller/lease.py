"""One active controller per cluster: a lease held through a Kafka consumer group.

Every controller joins the group `<topic prefix><lease_group>` on the one-partition topic
`recovery-lease`; the group gives that partition to exactly one live member, and that member
leads. A leader that dies stops heartbeating and the group hands the partition to another
member after the session timeout (6 s); a new member joining may also move it (the eager
protocol revokes it from the old leader before anyone else gets it). Standbys fold the log
all the time, so a new leader acts as soon as it holds the lease. `poll()` must be called
often (the service's lease thread): assignment callbacks run inside it.

Each time an instance takes the lease it reads the topic's last claim and appends its own, with
`epoch` = the greater of the last claim's epoch + 1 and the clock in milliseconds: epochs grow in
log order (a claim always outranks the one before it, whatever the clocks), and a recreated, empty
lease topic (an embedded broker restarted empty) starts above every epoch of the old one, so agents
that remember an old leader's epoch obey the new one. Every command and step the leader publishes
carries its epoch, so agents refuse the older epochs of a deposed leader (`vigil.signing.gate`). A
claim written before epochs were recorded (its value is not JSON) stands for its offset + 1. An
instance that cannot write its claim does not lead.
"""

from __future__ import annotations

import json
import logging
import threading
import time
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

    def _last_epoch(self) -> int:
        """The epoch of the lease topic's last claim (0 when it has none)."""
        part = TopicPartition(self.settings.topic(LEASE_TOPIC), 0)
        reader = Consumer({**client_config(self.settings, self.bootstrap), "enable.auto.commit": False,
                           "group.id": f"{self.settings.topic_prefix}{self.group}-epoch"})
        try:
            lo, hi = reader.get_watermark_offsets(part, timeout=5)
            if hi <= lo:
                return 0
            reader.assign([TopicPartition(part.topic, 0, hi - 1)])
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline:
                msg = reader.poll(0.5)
                if msg is not None and msg.error() is None and msg.offset() is not None:
                    return claim_epoch(msg.value() or b"", msg.offset() or 0)
            raise RuntimeError("the lease topic's last claim could not be read")
        finally:
            reader.close()

    def _claim(self) -> int | None:
        """Append a claim to the lease topic; its epoch, or None when it could not be read or written."""
        try:
            epoch = max(self._last_epoch() + 1, time.time_ns() // 1_000_000)
        except Exception as exc:
            log.warning("recovery controller: could not read the lease topic (%s); not leading", exc)
            return None
        got: list[int] = []

        def done(err: KafkaError | None, msg: Message) -> None:
            if err is None and msg.offset() is not None:
                got.append(epoch)

        self._producer.produce(self.settings.topic(LEASE_TOPIC), value=json.dumps({"epoch": epoch}).encode(),
                               key=self.group.encode(), on_delivery=done)
        self._producer.flush(10)
        if not got:
            log.warning("recovery controller: could not write its lease claim; not leading")
            return None
        return epoch

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


def claim_epoch(value: bytes, offset: int) -> int:
    """The epoch a claim record stands for: its recorded `epoch`, or (an earlier claim) its offset + 1."""
    try:
        doc = json.loads(value)
        return int(doc["epoch"]) if isinstance(doc, dict) and isinstance(doc.get("epoch"), int) else offset + 1
    except ValueError:
        return offset + 1
