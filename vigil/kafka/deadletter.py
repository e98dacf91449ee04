"""Dead letters: records or events that could not be accepted, kept with the reason.

A dead letter names where the bad input came from (topic, partition, offset) so it
can be inspected and replayed after a fix. Nothing invalid is dropped silently.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from vigil.contract.registry import DEAD_LETTER_TOPIC
from vigil.kafka.producer import EventProducer


@dataclass(frozen=True, kw_only=True)
class DeadLetter:
    reason: str
    topic: str
    partition: int
    offset: int
    payload: Any

    def to_json(self) -> bytes:
        return json.dumps(
            {"reason": self.reason, "topic": self.topic, "partition": self.partition, "offset": self.offset,
             "payload": self.payload, "ts": datetime.now(UTC).isoformat()},
            default=str,
        ).encode()


class DeadLetterSink(Protocol):
    def write(self, letters: Sequence[DeadLetter]) -> None:
        """Store the letters durably before returning."""


class KafkaDeadLetters:
    """Dead letters on the `<prefix>deadletter` topic, flushed before `write` returns."""

    def __init__(self, producer: EventProducer) -> None:
        self._producer = producer
        self._topic = producer.settings.topic(DEAD_LETTER_TOPIC)

    def write(self, letters: Sequence[DeadLetter]) -> None:
        if not letters:
            return
        for letter in letters:
            self._producer.produce_raw(self._topic, letter.to_json(), key=letter.topic.encode())
        self._producer.flush()


class MemoryDeadLetters:
    def __init__(self) -> None:
        self.letters: list[DeadLetter] = []

    def write(self, letters: Sequence[DeadLetter]) -> None:
        self.letters.extend(letters)
