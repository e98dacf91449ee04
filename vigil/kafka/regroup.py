"""Assignments and re-cuts in a consumer: what an earlier owner left uncommitted, and the records held meanwhile.

On assignment the batch an earlier owner of the partitions began to write and never committed is planned
(`vigil.kafka.recut`): re-cut (one at a time), or its offsets marked for re-check. While a re-cut batch is re-read
the chain cuts no batch of its own (`Accumulate.holding`); records past it are held, their partitions paused, and
handed to the chain in the order they were read once it is written (or given up: its offsets then re-checked).
Holding is bounded: a paused partition delivers nothing more. `BatchingConsumer` owns the group and calls this.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from confluent_kafka import Consumer, TopicPartition

from vigil.errors import one_line
from vigil.kafka.batch import Raw
from vigil.kafka.batchid import Partition
from vigil.kafka.recut import Recut, plan
from vigil.kafka.stats import ConsumerStats
from vigil.kafka.steps.chain import Chain

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class Regroup:
    consumer: Consumer
    chain: Chain
    stats: ConsumerStats
    from_beginning: bool
    held: list[Raw] = field(default_factory=list)  # records read while a re-cut batch is completed (or a retry waits)
    paused: set[Partition] = field(default_factory=set)
    _replay: Recut | None = None

    @property
    def replay(self) -> Recut | None:
        """The uncommitted batch being re-cut; while there is one the chain cuts no batch of its own."""
        return self._replay

    @replay.setter
    def replay(self, replay: Recut | None) -> None:
        self._replay = replay
        self.chain.accumulate.holding = replay is not None

    def assigned(self, partitions: list[TopicPartition]) -> None:
        """Plan what the partitions' earlier owner left (the chain's `intents`): a re-cut, or offsets to re-check."""
        tps = [(str(tp.topic), int(tp.partition)) for tp in partitions]
        source = self.chain.intents()
        if not tps or source is None:
            return
        recheck = self.chain.commit.recheck  # partition -> last offset an earlier owner may have stored
        try:
            intents = source.intents(tps)
            committed = {(str(tp.topic), int(tp.partition)): int(tp.offset)
                         for tp in self.consumer.committed(partitions, timeout=10)} if intents else {}
        except Exception as exc:  # cannot tell what an earlier owner left: re-check what it may have
            log.warning("reading intents on assignment failed, re-checking recent offsets: %s", one_line(exc))
            self.stats.last_error = f"intents: {one_line(exc)}"
            recheck.update({tp: 2**63 - 1 for tp in tps})  # until the first commit passes them
            return
        for part in partitions:  # never committed: reading starts at the log's start (auto.offset.reset=earliest)
            key = (str(part.topic), int(part.partition))
            if key in intents and committed.get(key, -1) < 0 and self.from_beginning:
                committed[key] = int(self.consumer.get_watermark_offsets(part, timeout=10)[0])
        recut = plan(intents, committed, tps, recheck, busy=self.replay is not None)
        if recut is not None:
            self.replay = recut
            log.info("re-cutting an uncommitted batch of %d partition(s) first recorded at %s",
                     len(recut.intent.ranges), recut.intent.at.isoformat())

    def route(self, raw: Raw) -> None:
        """A record read: to the chain, unless a re-cut is under way and it lies past it (held, partition paused)."""
        replay = self.replay
        if replay is not None:
            tp = (raw[0], raw[1])
            last = replay.last(tp)
            if last is None or raw[2] > last:  # not part of the batch being re-cut: hold it until that is written
                self.held.append(raw)
                replay.todo.pop(tp, None)
                if tp not in self.paused:
                    self.consumer.pause([TopicPartition(tp[0], tp[1])])
                    self.paused.add(tp)
                return
            if raw[2] == last:
                replay.todo.pop(tp, None)
        self.chain.decode.submit(raw)

    def abandon(self) -> None:
        """Give up re-cutting (partitions lost, records gone): what was read is re-checked instead."""
        if self.replay is None:
            return
        recheck = self.chain.commit.recheck
        for r in self.replay.intent.ranges:
            tp = (r.topic, r.partition)
            recheck[tp] = max(r.last, recheck.get(tp, -1))
        self.release()

    def release(self) -> None:
        """The re-cut is over: paused partitions resumed, held records handed to the chain as read."""
        self.replay = None
        if self.paused:
            self.consumer.resume([TopicPartition(t, p) for t, p in self.paused])
            self.paused.clear()
        held, self.held = self.held, []
        self.chain.accumulate.holding = True  # (as read, with no cut in between)
        try:
            for raw in held:
                self.chain.decode.submit(raw)
        finally:
            self.chain.accumulate.holding = self.replay is not None

    def revoked(self) -> None:
        """Partitions revoked: the batch being read, the re-cut, held records and re-checks are the next owner's."""
        self.chain.accumulate.take()
        self.replay = None
        self.held.clear()
        self.paused.clear()
        self.chain.commit.recheck.clear()
