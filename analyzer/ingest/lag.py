"""Consumer lag of the analyzer's group, sampled off the ingest path.

Lag per topic = high watermark - committed offset, summed over partitions, from two
batched admin calls (committed offsets of the group, latest offsets of the topics).
It runs in its own thread because some brokers answer offset queries slowly, and
ingest must never wait on a status figure.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

from vigil.errors import one_line
from vigil.kafka.admin import admin_client
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
        latest = admin.list_offsets({tp: spec for tp in parts}, request_timeout=timeout)
        out: dict[str, int] = {}
        for tp, fut in latest.items():
            high = fut.result().offset
            out[tp.topic] = out.get(tp.topic, 0) + max(0, high - done.get((tp.topic, tp.partition), 0))
        return out, sum(done.values())

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
