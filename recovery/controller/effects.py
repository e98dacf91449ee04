"""Everything the controller does to the world, behind one small interface.

`Effects.publish` puts events on Kafka (recovery actions, commands, verdicts, outcomes, pages)
and returns once the broker has them; the node backend cordons, uncordons and evicts.
`KafkaEffects` is the real one; `MemoryEffects` keeps what was published in a list (tests,
and `vigil recovery` commands run without a broker). The engine applies what it publishes
to its own state at once, so a step is never taken twice while its events travel.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from vigil.contract import Event
from vigil.kafka.producer import EventProducer
from vigil.recovery.backends.base import NodeBackend


class Effects(Protocol):
    backend: NodeBackend

    def publish(self, events: Sequence[Event]) -> None:
        """Deliver the events durably before returning; raise when the broker did not take them."""
        ...


@dataclass(kw_only=True)
class KafkaEffects:
    producer: EventProducer
    backend: NodeBackend
    flush_s: float = 10.0

    def publish(self, events: Sequence[Event]) -> None:
        if events:
            self.producer.send(events)
            self.producer.flush(self.flush_s)


@dataclass(kw_only=True)
class MemoryEffects:
    backend: NodeBackend
    events: list[Event] = field(default_factory=list)

    def publish(self, events: Sequence[Event]) -> None:
        self.events.extend(events)
