"""The ingest loop: a BatchingConsumer over the telemetry, alerts and recovery topics into ClickHouse.

Runs in its own thread; every few seconds it samples the event rate, and a
`LagProbe` thread samples the consumer lag, for `vigil status`.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from vigil.analyzer.ingest.writer import ClickHouseDeadLetters, ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.contract.registry import TELEMETRY_TOPICS
from vigil.kafka.consumer import BatchingConsumer
from vigil.kafka.deadletter import KafkaDeadLetters
from vigil.kafka.lag import LagProbe
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)

INGEST_TOPICS: tuple[str, ...] = (*TELEMETRY_TOPICS, "alerts", "recovery")


@dataclass(kw_only=True)
class IngestLoop:
    settings: VigilSettings
    analyzer: AnalyzerSettings
    bootstrap: str
    client: Any
    producer: EventProducer
    sample_every_s: float = 5.0
    events_per_s: float = 0.0
    last_error: str = ""

    def __post_init__(self) -> None:
        self.writer = ClickHouseWriter(client=self.client)
        sink = ClickHouseDeadLetters(client=self.client, inner=KafkaDeadLetters(self.producer))
        self.consumer = BatchingConsumer(
            settings=self.settings, bootstrap=self.bootstrap, group_id=self.analyzer.group_id,
            topics=list(INGEST_TOPICS), writer=self.writer, dead_letters=sink,
            max_batch_events=self.analyzer.batch_events, max_batch_s=self.analyzer.batch_s,
        )
        self.probe = LagProbe(settings=self.settings, bootstrap=self.bootstrap, group_id=self.analyzer.group_id,
                              topics=INGEST_TOPICS, every_s=self.sample_every_s)

    @property
    def lag(self) -> dict[str, int]:
        return dict(self.probe.lag)

    @property
    def stats(self) -> Any:
        return self.consumer.stats

    def run(self, stop: threading.Event) -> None:
        last_t, last_n = time.monotonic(), 0
        probe = threading.Thread(target=self.probe.run, args=(stop,), name="analyzer-lag", daemon=True)
        probe.start()
        try:
            while not stop.is_set():
                try:
                    self.consumer.poll(stop=stop)
                except Exception as exc:  # never let the thread die on a surprise
                    self.last_error = f"ingest: {exc}"
                    log.exception("ingest poll failed")
                    stop.wait(1.0)
                now = time.monotonic()
                if now - last_t >= self.sample_every_s:
                    n = self.consumer.stats.events
                    self.events_per_s = (n - last_n) / (now - last_t)
                    last_t, last_n = now, n
        finally:
            self.consumer.run(stop)  # stop is set: flushes and commits what is batched, then closes
