"""The intent ledger (`ingest_intents`, migration 0141): which batch a consumer group is about to write.

One row per partition of the batch, each carrying the batch's full ranges, written before
the batch's rows. A consumer assigned a partition reads its latest row to learn whether a
batch over it was attempted and maybe not committed, and which records it was made of.
The chain's intent step (`vigil.analyzer.ingest.steps.intent`) records and reads it; `guard` runs each call (the
writer's `locked`: the ledger shares the writer's client, which takes one call at a time, and a transient failure
raises `Unreachable` so the consumer retries it).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

from vigil.kafka.consumer import BatchId, Intent, OffsetRange, Partition

T = TypeVar("T")


class Guard(Protocol):
    def __call__(self, fn: Callable[[], T]) -> T: ...


def _direct(fn: Callable[[], T]) -> T:
    return fn()


def _ranges_json(ranges: Sequence[OffsetRange]) -> str:
    return json.dumps([[r.topic, r.partition, r.first, r.last, r.first_ts] for r in ranges], separators=(",", ":"))


def _ranges(text: str) -> tuple[OffsetRange, ...]:
    return tuple(OffsetRange(topic=str(t), partition=int(p), first=int(f), last=int(la), first_ts=int(ts))
                 for t, p, f, la, ts in json.loads(text))


class IntentLedger:
    def __init__(self, client: Any, group: str, guard: Guard = _direct) -> None:
        self._client, self._group, self._guard = client, group, guard

    def record(self, batch: BatchId) -> datetime:
        """Record `batch` as about to be written; returns when (the ledger's clock)."""
        return self._guard(lambda: self._record(batch))

    def latest(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        """The latest intent recorded for each of `partitions` (absent: none)."""
        return self._guard(lambda: self._latest(partitions))

    def _record(self, batch: BatchId) -> datetime:
        text = _ranges_json(batch.ranges)
        rows = [[self._group, r.topic, r.partition, batch.token, text] for r in batch.ranges]
        self._client.insert("ingest_intents", rows, column_names=["group_id", "topic", "partition", "token", "ranges"])
        return datetime.now(UTC)

    def _latest(self, partitions: Sequence[Partition]) -> dict[Partition, Intent]:
        if not partitions:
            return {}
        topics = sorted({t for t, _ in partitions})
        res = self._client.query(
            "SELECT topic, partition, argMax(ranges, ts), max(ts) FROM ingest_intents "
            "WHERE group_id = {g:String} AND topic IN {topics:Array(String)} GROUP BY topic, partition",
            parameters={"g": self._group, "topics": topics})
        wanted = set(partitions)
        out: dict[Partition, Intent] = {}
        for topic, partition, ranges, at in res.result_rows:
            tp = (str(topic), int(partition))
            if tp in wanted:
                out[tp] = Intent(ranges=_ranges(str(ranges)), at=at.replace(tzinfo=UTC) if at.tzinfo is None else at)
        return out
