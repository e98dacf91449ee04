"""Following topics without a consumer group: the whole log from the beginning, then what comes.

For services whose state is a fold of the log (the recovery controller) and for node agents
reading their commands: every partition of the given topics is assigned directly (no group,
no committed offsets), read from the first offset, and followed. `caught_up` turns true once
every partition reached its end at least once, i.e. the state folded so far covers the log
as it was at start. Partitions that appear later (a topic created after start) are picked up
by `refresh()`. Undecodable records and invalid events are counted, never raised; those refused
only for a `ts` dated ahead are also kept (the newest `AHEAD_KEPT`) for `take_ahead()`, so a
service can report a future-dated claim.
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from vigil.contract.base import Event
from vigil.contract.wire import Rejected, decode_batch
from vigil.kafka.admin import client_config, unreachable
from vigil.settings import VigilSettings

AHEAD_KEPT = 1000


@dataclass(kw_only=True)
class Follower:
    settings: VigilSettings
    bootstrap: str
    topics: Sequence[str]  # logical names
    refresh_s: float = 10.0
    rejected: int = field(default=0, init=False)
    last_error: str = field(default="", init=False)
    _ahead: deque[Rejected] = field(default_factory=lambda: deque(maxlen=AHEAD_KEPT), init=False)
    _assigned: set[tuple[str, int]] = field(default_factory=set, init=False)
    _pending_eof: set[tuple[str, int]] = field(default_factory=set, init=False)
    _caught_up: bool = field(default=False, init=False)
    _refreshed: float = field(default=0.0, init=False)

    def __post_init__(self) -> None:
        conf: dict[str, Any] = {
            **client_config(self.settings, self.bootstrap),
            "group.id": f"vigil-follower-{uuid.uuid4().hex[:8]}",  # required by librdkafka; never joined
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
        self._consumer = Consumer(conf)
        self.refresh()

    @property
    def caught_up(self) -> bool:
        return self._caught_up

    def refresh(self) -> None:
        """Assign partitions that appeared since the last look, from their beginning."""
        self._refreshed = time.monotonic()
        try:
            meta = self._consumer.list_topics(timeout=5.0)
        except KafkaException as exc:
            raise unreachable(self.settings, self.bootstrap, exc) from None
        new = [TopicPartition(name, p, OFFSET_BEGINNING)
               for name in (self.settings.topic(t) for t in self.topics) if name in meta.topics
               for p in meta.topics[name].partitions if (name, p) not in self._assigned]
        if new:
            self._consumer.incremental_assign(new)
            for tp in new:
                self._assigned.add((tp.topic, tp.partition))
                if not self._caught_up:
                    self._pending_eof.add((tp.topic, tp.partition))
        if not self._pending_eof and self._assigned:
            self._caught_up = True

    def poll(self, timeout: float = 0.2, max_records: int = 500) -> list[Event]:
        """The events of the records that arrived within `timeout` (may be empty)."""
        if time.monotonic() - self._refreshed >= self.refresh_s or not self._assigned:
            try:
                self.refresh()
            except Exception as exc:
                self.last_error = str(exc)
        if not self._assigned:
            time.sleep(timeout)
            return []
        events: list[Event] = []
        for msg in self._consumer.consume(num_messages=max_records, timeout=timeout):
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    self._pending_eof.discard((str(msg.topic()), int(msg.partition() or 0)))
                    if not self._pending_eof:
                        self._caught_up = True
                else:
                    self.last_error = err.str()
                continue
            decoded = decode_batch(msg.value())
            events.extend(decoded.events)
            self.rejected += len(decoded.rejected)
            self._ahead.extend(r for r in decoded.rejected if r.ahead)
        return events

    def take_ahead(self) -> list[Rejected]:
        """The events refused for a `ts` dated ahead since the last call (at most `AHEAD_KEPT`)."""
        out = list(self._ahead)
        self._ahead.clear()
        return out

    def close(self) -> None:
        try:
            self._consumer.close()
        except RuntimeError:
            pass
