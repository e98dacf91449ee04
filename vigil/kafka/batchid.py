"""What a batch is: the offset ranges it covers, the identity its writer inserts under, and what cannot be stored.

A `BatchId` is derived from its ranges only: the same records cut again give the same token, so a writer that
inserts under it stores nothing twice (the consumer's at-least-once delivery becomes exactly-once in the store).
An `Intent` is a batch recorded as about to be written; an `Unstorable` is an event its writer can never store.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property

from vigil.contract.hotkinds import Ingestable

Partition = tuple[str, int]


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
