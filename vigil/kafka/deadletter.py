"""Dead letters: records or events that could not be accepted, kept with the reason.

A dead letter names where the bad input came from (topic, partition, offset) so it
can be inspected and replayed after a fix. Nothing invalid is dropped silently.

A dead letter is bounded, whatever it is about: its payload is kept whole up to
`PAYLOAD_HEAD` bytes of JSON, else as the first `PAYLOAD_HEAD` bytes of that JSON (a
string) with `payload_truncated`; either way with the payload's size (`payload_bytes`)
and `payload_sha256`, which identify the original in its source topic. The reason is
cut to `REASON_MAX` characters. So a dead letter always fits a record: a poison record
of any size cannot make writing its own dead letter fail; nor can one whose strings are not
valid UTF-8 (a lone surrogate escape): the letter's text is made valid, its hash is of the original.

Letters are bounded per record too (`per_record`): the first `PER_RECORD` rejected events of one record
get a letter each, the rest one summary letter (`count`: how many it stands for, with their reasons
counted), so a 900 KB record of tiny bad events makes a handful of letters, not hundreds of megabytes.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from vigil.contract.registry import DEAD_LETTER_TOPIC
from vigil.kafka.producer import EventProducer

PAYLOAD_HEAD = 4096
REASON_MAX = 1024
PER_RECORD = 10


def bounded(payload: Any) -> dict[str, Any]:
    """The payload as a dead letter keeps it: whole when its JSON is small, else its head; plus size and sha256."""
    text = json.dumps(payload, default=str, ensure_ascii=False).encode("utf-8", "replace")
    out: dict[str, Any] = {"payload_bytes": len(text), "payload_sha256": hashlib.sha256(text).hexdigest()}
    if len(text) <= PAYLOAD_HEAD:
        out["payload"] = payload
    else:
        out["payload"] = text[:PAYLOAD_HEAD].decode("utf-8", "ignore")
        out["payload_truncated"] = True
    return out


def clean_utf8(text: str) -> str:
    """`text` as valid UTF-8 (a lone surrogate, which JSON's `\\ud800` escape can carry, becomes `?`)."""
    return text.encode("utf-8", "replace").decode("utf-8")


@dataclass(frozen=True, kw_only=True)
class DeadLetter:
    reason: str
    topic: str
    partition: int
    offset: int
    payload: Any
    count: int = 1  # the rejected events it stands for (> 1: a record's summary letter)

    def document(self) -> dict[str, Any]:
        """What is stored of the letter (bounded: see the module docstring)."""
        return {"reason": self.reason[:REASON_MAX], "topic": self.topic, "partition": self.partition,
                "offset": self.offset, **bounded(self.payload), "ts": datetime.now(UTC).isoformat(),
                **({"count": self.count} if self.count != 1 else {})}

    def to_json(self) -> bytes:
        return clean_utf8(json.dumps(self.document(), default=str, ensure_ascii=False)).encode()


def per_record(rejected: Iterable[tuple[str, Any]], *, topic: str, partition: int, offset: int,
               first: int = PER_RECORD) -> list[DeadLetter]:
    """The letters of one record's rejected (reason, payload) events: the `first` ones, then one summary."""
    letters: list[DeadLetter] = []
    rest: Counter[str] = Counter()
    for reason, payload in rejected:
        if len(letters) < first:
            letters.append(DeadLetter(reason=reason, topic=topic, partition=partition, offset=offset, payload=payload))
        else:
            rest[reason[:200]] += 1
    if rest:
        n = sum(rest.values())
        letters.append(DeadLetter(
            reason=f"{n} more events of this record rejected (the first {first} have letters of their own)",
            topic=topic, partition=partition, offset=offset, count=n,
            payload={"reasons": dict(rest.most_common(20)), "distinct_reasons": len(rest)}))
    return letters


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
