"""The ingest loop: a BatchingConsumer over the telemetry, alerts and recovery topics into ClickHouse.

Runs in its own thread; every few seconds it samples the event rate, and a
`LagProbe` thread samples the consumer lag (for `vigil status`) and the ingest frontier
(for the detector engine's idle rule) every second. A transient store or
broker failure is retried by the consumer (state "retrying"); any other error stops the
loop with `failed` set to it (state "failed"): the service reports it and `vigil analyzer`
exits non-zero, so a supervisor restarts it and the uncommitted batch is re-read.

Decisions (alerts, incidents, recovery steps and outcomes, advice) pass the signing gate
(`vigil.signing.policy.check`) on the way in: a refused one is stored flagged `verified = 0` with its
signature (`processors.process`), and detectors and views read verified rows only.

`client` must be the writer's own ClickHouse client: a chdb handle that raised may hand
leftover output to its next query, and a client shared with readers makes them wait for
the inserts (clickhouse-connect holds one lock per client for a whole call).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from vigil.analyzer.ingest.chain import ingest_chain
from vigil.analyzer.ingest.intents import IntentLedger
from vigil.analyzer.ingest.offload import DecodeProcess, InlineDecode
from vigil.analyzer.ingest.writer import ClickHouseDeadLetters, ClickHouseWriter
from vigil.analyzer.settings import AnalyzerSettings
from vigil.contract import LogLine
from vigil.contract.registry import TELEMETRY_TOPICS
from vigil.errors import one_line
from vigil.kafka.consumer import BatchingConsumer, ConsumerFailed
from vigil.kafka.deadletter import KafkaDeadLetters
from vigil.kafka.lag import LagProbe
from vigil.kafka.producer import EventProducer
from vigil.settings import VigilSettings
from vigil.signing.policy import check, vouched_fact
from vigil.signing.setup import verifier

log = logging.getLogger(__name__)

INGEST_TOPICS: tuple[str, ...] = (*TELEMETRY_TOPICS, "alerts", "incidents", "recovery")


AUTO_MIN_CPUS = 3
"""`decode_process` unset: the decode process runs when the analyzer may use at least this many CPUs. On 2 the
machine's CPU, not the GIL, bounds the ingest (the engine's insert takes most of one), so the child only moves the
work and takes cores from the detectors' turns (bench/RESULTS.md)."""


def decode_process(setting: bool | None) -> bool:
    """Whether the ingest decodes step and NIC records in a child process (`offload`); without one they are decoded
    into their columns the same way on the consumer's thread (`offload.InlineDecode`)."""
    if setting is not None:
        return setting
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return cpus >= AUTO_MIN_CPUS


@dataclass(kw_only=True)
class IngestLoop:
    settings: VigilSettings
    analyzer: AnalyzerSettings
    bootstrap: str
    client: Any
    producer: EventProducer
    sample_every_s: float = 5.0
    probe_every_s: float = 1.0  # lag and ingest frontier (the detector engine's idle rule waits on it)
    events_per_s: float = 0.0
    last_error: str = ""
    failed: str = ""  # the error that stopped ingest; empty while it runs

    def __post_init__(self) -> None:
        ring = verifier(self.settings.home)  # the read side runs the same gate on decisions: forged ones stored flagged
        self.writer = ClickHouseWriter(client=self.client, window_s=self.analyzer.dedup_window_s, verify=lambda e: gate(e, ring))
        self.sink = sink = ClickHouseDeadLetters(client=self.client, inner=KafkaDeadLetters(self.producer))
        self.decoder = DecodeProcess() if decode_process(self.analyzer.decode_process) else None
        if self.decoder is not None:
            self.decoder.start()  # the child imports while the group is joined
        self.consumer = BatchingConsumer(
            settings=self.settings, bootstrap=self.bootstrap, group_id=self.analyzer.group_id,
            topics=list(INGEST_TOPICS), writer=self.writer, dead_letters=sink,
            max_batch_events=self.analyzer.batch_events, max_batch_s=self.analyzer.batch_s,
            pipeline=self.analyzer.write_thread,
            chain=ingest_chain(self.decoder or InlineDecode(),  # (else decoded on the consumer's thread)
                               IntentLedger(self.client, self.analyzer.group_id, guard=self.writer.locked),
                               seconds=self.writer.seconds),
        )
        self.probe = LagProbe(settings=self.settings, bootstrap=self.bootstrap, group_id=self.analyzer.group_id,
                              topics=INGEST_TOPICS, every_s=self.probe_every_s)

    @property
    def lag(self) -> dict[str, int]:
        return dict(self.probe.lag)

    @property
    def frontier(self) -> datetime | None:
        """Wall time before which everything produced to the ingested topics is stored (None before a sample)."""
        f = self.probe.frontier
        return datetime.fromtimestamp(f, UTC) if f is not None else None

    @property
    def topic_frontiers(self) -> dict[str, datetime]:
        """Per ingested topic, the wall time before which everything produced to it is stored (sampled topics only)."""
        return {t: datetime.fromtimestamp(f, UTC) for t, f in dict(self.probe.topic_frontiers).items()}

    @property
    def stats(self) -> Any:
        return self.consumer.stats

    def run(self, stop: threading.Event) -> None:
        last_t, last_n = time.monotonic(), 0
        probe = threading.Thread(target=self.probe.run, args=(stop,), name="analyzer-lag", daemon=True)
        probe.start()
        try:
            while not stop.is_set():
                self.consumer.poll(stop=stop)
                now = time.monotonic()
                if now - last_t >= self.sample_every_s:
                    n = self.consumer.stats.events
                    self.events_per_s = (n - last_n) / (now - last_t)
                    last_t, last_n = now, n
        except Exception as exc:  # ConsumerFailed, or a bug outside the write: stop, commit nothing more
            self.failed = self.last_error = f"ingest stopped: {one_line(exc)}"
            self.consumer.stats.state = "failed"
            log.error("ingest stopped: %s", exc, exc_info=not isinstance(exc, ConsumerFailed))
            self.consumer.close()
            self._close_decoder()
            return
        try:
            self.consumer.run(stop)  # stop is set: flushes and commits what is batched, then closes
        finally:
            self._close_decoder()

    def _close_decoder(self) -> None:
        if self.decoder is not None:
            self.decoder.close()


def gate(event: Any, ring: Any) -> bool:
    """The read side's gate: a decision validly signed by a role that may make it; a hardware fact attested by its own
    host's agent (`vouched_fact`: else it is stored as a claim); any other fact passes."""
    if isinstance(event, LogLine):
        return event.source == "process" or vouched_fact(event, ring)
    return check(event, ring) is None

