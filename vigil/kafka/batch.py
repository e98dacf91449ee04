"""A batch being cut: the records read since the last cut, decoded here or claimed by an offload, and their ranges.

Its size (`len`) counts events decoded here, dead letters and the offload's estimate of what it claimed, so the
size bound holds whichever process decodes. Once the offload answered (`resolve`), `everything` gives every event
in the order its records were read (the offload's too, as objects) and `sources` names the record of each event,
so a dead letter for an event its writer refused points at that record. Pure: no Kafka, no threads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from vigil.contract.hotkinds import Ingestable
from vigil.kafka.batchid import BatchId, OffsetRange, Partition
from vigil.kafka.deadletter import DeadLetter
from vigil.kafka.ports import Deferred, Pending

Raw = tuple[str, int, int, int, bytes | None]  # a polled record: topic, partition, offset, timestamp, value
_EVENT_ID = attrgetter("event_id")


@dataclass
class Batch:
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
    own_letters: int | None = None  # the dead letters of the records decoded while consuming (before `resolve`'s)
    offloaded: Deferred | None = None  # once resolved: what the offload decoded (None: it decoded nothing)
    declined: list[list[Ingestable] | None] = field(default_factory=list)  # per claimed record: decoded here, if so
    here: tuple[list[Ingestable], list[tuple[int, str, int, int]]] | None = None  # resolved: the events decoded here
    _everything: tuple[list[Ingestable], list[tuple[int, str, int, int]]] | None = None

    def __len__(self) -> int:
        return len(self.events) + len(self.letters) + self.estimate

    def add(self, raw: Raw, events: Sequence[Ingestable] | None, estimate: int = 0) -> None:
        """A record: its events decoded here (`events`), or claimed by the offload (None, about `estimate` events)."""
        topic, partition, offset, ts, value = raw
        if events is None:
            self.deferred.append((len(self.records), topic, partition, offset, value))
            self.estimate += estimate
        else:
            self.events.extend(events)
            self.records.append((len(self.events), topic, partition, offset))
        rng = self.ranges.get((topic, partition))
        if rng is None:
            self.ranges[(topic, partition)] = [offset, offset, ts]
        else:
            rng[0], rng[1] = min(rng[0], offset), max(rng[1], offset)


    def identity(self, recheck: dict[Partition, int]) -> BatchId:
        """Its id: its ranges, marked `recheck` where they reach an offset an earlier owner may have stored."""
        ranges = tuple(sorted(OffsetRange(topic=t, partition=p, first=f, last=la, first_ts=ts)
                              for (t, p), (f, la, ts) in self.ranges.items()))
        return BatchId(ranges=ranges, recheck=any(r.first <= recheck.get((r.topic, r.partition), -1) for r in ranges))

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
