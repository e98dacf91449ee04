"""Consumer lag of a group, sampled off the consuming path; a group's progress seen from outside.

Lag per topic = end offset - committed offset, summed over partitions: the group's committed
offsets and the topics' latest offsets come from two batched admin calls, and the latest offsets
are then confirmed by a fetch (`vigil.kafka.ends`): the embedded broker lists an offset below the
log's end for good, so a lag from ListOffsets alone read 0 while records were unread. A sample
whose ends cannot be confirmed fails (lag unknown, `last_error` set) rather than read low.
`LagProbe.run` samples in its own thread because some brokers answer offset queries
slowly, and a consumer must never wait on a status figure. `group_progress` is what
`vigil status` shows of a service running elsewhere: its group's lag and commit rate.

It also keeps the *ingest frontier*: the newest sample time T such that the group has
committed, on every partition, past the end offset that partition had at T — so every
record produced before T is stored (the consumer commits after the write). The
analyzer's detector engine judges a source idle against it, not against now: while the
ingest is saturated the frontier lags, and hosts whose data is still queued are late,
not silent.

It keeps the same per topic (`topic_frontiers`, by the names in `topics`): the newest sample time
T such that the group has committed past the end offset each of that topic's partitions had at
T. A topic all of whose partitions are caught up has a frontier near now; a heavy topic that one
slow partition holds back has an old one, though a light topic beside it is current (the
analyzer then waits for its sources instead of taking them for silent).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from vigil.errors import one_line
from vigil.kafka.admin import admin_client
from vigil.kafka.ends import confirmed_ends
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class LagProbe:
    settings: VigilSettings
    bootstrap: str
    group_id: str
    topics: Sequence[str]
    every_s: float = 5.0
    lag: dict[str, int] = field(default_factory=dict)
    last_error: str = ""
    frontier: float | None = None  # wall time (s since 1970): everything produced before it is stored
    topic_frontiers: dict[str, float] = field(default_factory=dict)  # topic (as in `topics`) -> its own frontier
    _marks: deque[tuple[float, dict[tuple[str, int], int]]] = field(default_factory=lambda: deque(maxlen=3600),
                                                                   repr=False)
    _topic_marks: dict[str, deque[tuple[float, dict[tuple[str, int], int]]]] = field(default_factory=dict, repr=False)

    def sample(self, timeout: float = 10.0) -> dict[str, int]:
        return self.offsets(timeout)[0]

    def offsets(self, timeout: float = 10.0) -> tuple[dict[str, int], int]:
        """(lag per topic, the group's committed offsets summed): two samples apart give its rate."""
        admin = admin_client(self.settings, self.bootstrap)
        names = [self.settings.topic(t) for t in self.topics]
        meta = admin.list_topics(timeout=timeout)
        parts = [TopicPartition(t, p) for t in names if t in meta.topics for p in meta.topics[t].partitions]
        if not parts:
            return {}, 0
        committed_req = [ConsumerGroupTopicPartitions(self.group_id, parts)]
        committed = admin.list_consumer_group_offsets(committed_req, request_timeout=timeout)[self.group_id].result()
        done = {(tp.topic, tp.partition): max(tp.offset, 0) for tp in committed.topic_partitions}
        spec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        asked = time.time()  # records produced before this have offsets below the ends read next
        latest = admin.list_offsets({tp: spec for tp in parts}, request_timeout=timeout)
        listed = {(tp.topic, tp.partition): int(fut.result().offset) for tp, fut in latest.items()}
        highs = confirmed_ends(self.settings, self.bootstrap, listed, timeout)  # listed is a lower bound
        out: dict[str, int] = {}
        for (topic, part), high in highs.items():
            out[topic] = out.get(topic, 0) + max(0, high - done.get((topic, part), 0))
        self._advance_frontier(asked, highs, done)
        self.advance_topics(asked, highs, done, {self.settings.topic(t): t for t in self.topics})
        return out, sum(done.values())

    def _advance_frontier(self, asked: float, highs: dict[tuple[str, int], int],
                          done: dict[tuple[str, int], int]) -> None:
        self._marks.append((asked, highs))
        while self._marks and all(done.get(tp, 0) >= high for tp, high in self._marks[0][1].items()):
            self.frontier = max(self.frontier or 0.0, self._marks.popleft()[0])

    def advance_topics(self, asked: float, highs: dict[tuple[str, int], int], done: dict[tuple[str, int], int],
                        names: dict[str, str]) -> None:
        """Each topic's frontier: its partitions' ends at a sample, all committed past (one slow partition holds its
        topic back, not the others)."""
        per: dict[str, dict[tuple[str, int], int]] = {}
        for tp, high in highs.items():
            per.setdefault(names.get(tp[0], tp[0]), {})[tp] = high
        for topic, ends in per.items():
            marks = self._topic_marks.setdefault(topic, deque(maxlen=3600))
            marks.append((asked, ends))
            while marks and all(done.get(tp, 0) >= high for tp, high in marks[0][1].items()):
                self.topic_frontiers[topic] = max(self.topic_frontiers.get(topic, 0.0), marks.popleft()[0])

    def run(self, stop: threading.Event) -> None:
        while True:
            try:
                self.lag = self.sample()
                self.last_error = ""
            except Exception as exc:
                self.last_error = f"lag: {one_line(exc, 200)}"
                log.debug("lag sample failed: %s", exc)
            if stop.wait(self.every_s):
                return


def group_progress(settings: VigilSettings, bootstrap: str, group_id: str, topics: Sequence[str], *,
                   consumer: str = "a consumer", window_s: float = 2.0) -> dict[str, Any]:
    """The group's lag and commit rate over `window_s`: down when it lags and commits nothing."""
    probe = LagProbe(settings=settings, bootstrap=bootstrap, group_id=group_id, topics=topics)
    try:
        _, before = probe.offsets()
        time.sleep(window_s)
        lag, after = probe.offsets()
    except Exception as exc:
        return {"ok": False, "group": group_id, "error": f"lag of group {group_id}: {one_line(exc, 200)}"}
    rate = (after - before) / window_s
    behind = sum(lag.values())
    ok = behind == 0 or rate > 0
    return {"ok": ok, "group": group_id, "lag": behind, "records_per_s": round(rate, 1),
            **({} if ok else {"error": f"lagging and committing nothing: is {consumer} running?"})}
