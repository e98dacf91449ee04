"""AnalyzerService: the ingest loop and the detector loop as one service of `vigil up`.

`start()` restores the alert book and the incident book from their topics, then starts
two threads: ingest (Kafka -> ClickHouse, committing after each write) and detect (turns of
the live cursor: judge active jobs on their event-time clocks, publish the resulting alert
and incident events to their topics, which the ingest stores back into `alert_events` /
`incident_events`, then save the positions reached). A turn that catches up publishes what
it raised after each round of instants, not only at its end: a host lost during a stall of
the watermark pages at the first instants judged after it, however many wait behind them. Between the detectors and the alert
book, the incident stage groups findings under incidents and demotes victims'
(`analyzer.incidents`). A turn is bounded (`turn_budget_s`); while instants wait (a burst,
a catch-up) the next turn starts at once, otherwise `detect_interval_s` after the last one
started (a period, not a pause after each turn: a long turn does not delay the next). The
cursor's idle rule uses the ingest's frontier (vigil/kafka/lag.py), so a saturated ingest
delays judgement instead of making hosts look silent, and each topic's own frontier, so a
heavy topic behind a light one holds its sources' jobs back instead of letting them go. `health()` is cheap: figures
sampled by the threads, never a query.

Ingest scales out (instances share the consumer group); so does detection, by job: with
`detect_shards` on, each detecting instance joins the `vigil-detect` group and judges only
the jobs of the partitions it is assigned (analyzer/shardgroup.py), and writes lease records that `vigil status`
reads from the broker (analyzer/shardreport.py). A turn holds the turn
lock through publishing and saving positions, so a revocation waits for it; after an
assignment changed, the next turn first restores the owned jobs' alert and incident books
from their topics (and drops the others'), and the cursor goes on from the saved positions.
Off (the default), one detecting instance judges every job.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from vigil.analyzer.alerts.book import AlertBook
from vigil.analyzer.alerts.view import read_alert_events
from vigil.analyzer.engine import LiveCursor
from vigil.analyzer.incidents.stage import IncidentStage
from vigil.analyzer.incidents.view import read_incident_events
from vigil.analyzer.ingest.loop import IngestLoop
from vigil.analyzer.metrics import AnalyzerMetrics
from vigil.analyzer.positions import ClickHousePositions
from vigil.analyzer.settings import AnalyzerSettings
from vigil.analyzer.shard import Ownership, describe
from vigil.analyzer.shardgroup import ShardGroup
from vigil.clickhouse.client import open_client
from vigil.contract import Event
from vigil.contract.services import ServiceKind
from vigil.errors import one_line
from vigil.kafka.announce import Announcer
from vigil.kafka.producer import EventProducer
from vigil.metrics.server import MetricsServer
from vigil.service import StackContext
from vigil.signing import Role
from vigil.signing.setup import signer

log = logging.getLogger(__name__)


class AnalyzerService:
    name = "analyzer"

    def __init__(self, ctx: StackContext, settings: AnalyzerSettings | None = None) -> None:
        self.ctx = ctx
        self.settings = settings or AnalyzerSettings.load()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        # alerts and incidents are decisions the controller and the notifier act on: signed as the analyzer
        self.producer = EventProducer(settings=ctx.settings, bootstrap=ctx.bootstrap, batch_events=500,
                                      signer=signer(Role.ANALYZER, ctx.settings.home))
        self.book = AlertBook(refresh_s=self.settings.refresh_s)
        self.incidents = IncidentStage(self.settings)
        sharded = self.settings.detect and self.settings.detect_shards
        self.owner = Ownership(partitions=self.settings.detect_partitions, owned=[]) if sharded else None
        self.group: ShardGroup | None = None
        self._turn_lock = threading.Lock()  # a turn, its publishing and its positions saved: a handover waits
        self._books_seen = 0  # the ownership change the books were last restored for
        self.cursor = LiveCursor(settings=self.settings, book=self.book, store=ClickHousePositions(client=ctx.clickhouse),
                                 stages=(self.incidents,), owner=self.owner)
        self.ingest: IngestLoop | None = None
        self.alerts_published = 0
        self._unpublished: list[Event] = []
        self._turn_failed = False
        self.detect_turns = 0
        self._turn_at = 0.0  # wall time the last turn ended
        self.last_error = ""
        self.metrics = AnalyzerMetrics()
        self._metrics_server = MetricsServer(self.metrics.registry, bind=self.metrics.settings.bind,
                                             port=self.settings.metrics_port) if self.metrics.settings.enabled else None
        self._turn_published: list[Event] = []
        self.announcer = Announcer(ctx.settings, ctx.bootstrap, ServiceKind.DETECT if sharded else ServiceKind.ANALYZER,
                                   metrics_url=lambda: self._metrics_server.url if self._metrics_server else "")

    def start(self) -> None:
        if self.settings.detect and self.owner is None:  # a shard restores its jobs' books once they are assigned
            # as of the saved positions: a turn killed before saving them is judged again, not re-published
            self.book.restore(read_alert_events(self.ctx.settings, self.ctx.bootstrap), until=self.cursor.saved())
            self.incidents.book.restore(read_incident_events(self.ctx.settings, self.ctx.bootstrap))
        # its own producer: a flush reports every failure since the last one, so one user each
        dead_letters = EventProducer(settings=self.ctx.settings, bootstrap=self.ctx.bootstrap, batch_events=500)
        # the writer's own ClickHouse client: detectors, the dashboard and the control port never wait on its inserts
        database = getattr(self.ctx.clickhouse, "database", None) or "vigil"
        writer_client = open_client(self.ctx.clickhouse_dsn, database=database) if self.ctx.clickhouse_dsn \
            else self.ctx.clickhouse
        self.ingest = IngestLoop(settings=self.ctx.settings, analyzer=self.settings, bootstrap=self.ctx.bootstrap,
                                 client=writer_client, producer=dead_letters)
        self.ingest.writer.on_stored = self.metrics.stored
        self.ingest.sink.on_written = self.metrics.dead_lettered
        self.metrics.ingest = self.ingest
        if self._metrics_server is not None:
            self._metrics_server.start()
        self.announcer.start()
        self._stop.clear()
        self._threads = [
            threading.Thread(target=self.ingest.run, args=(self._stop,), name="analyzer-ingest", daemon=True),
        ]
        if self.owner is not None:
            self.group = ShardGroup(settings=self.ctx.settings, bootstrap=self.ctx.bootstrap, owner=self.owner,
                                    turn_lock=self._turn_lock)
            self._threads.append(threading.Thread(target=self._group_loop, name="analyzer-shard", daemon=True))
        if self.settings.detect:
            self._threads.append(threading.Thread(target=self._detect_loop, name="analyzer-detect", daemon=True))
        for t in self._threads:
            t.start()

    def _detect_loop(self) -> None:
        wait = self.settings.detect_interval_s
        while not self._stop.wait(wait):
            started = time.monotonic()
            self.detect_once()
            took = time.monotonic() - started
            self.metrics.turned(took, not self._turn_failed, self._turn_published, self.book.firing(),
                                self.cursor.behind_s)
            self._turn_published = []
            period = self.settings.detect_interval_s
            wait = period if self._turn_failed else 0.0 if self.cursor.backlog else max(0.0, period - took)

    def _group_loop(self) -> None:
        assert self.group is not None
        while not self._stop.is_set():
            self.group.poll(0.5)

    def _restore_owned(self) -> None:
        """Jobs moved: keep the books of the jobs owned now, restored from the topics (the source of truth)."""
        assert self.owner is not None
        owns = self.owner.owns
        self.book.current = {fp: a for fp, a in self.book.current.items() if owns(a.job_id)}
        self.book.ahead = set()
        self.book.restore((a for a in read_alert_events(self.ctx.settings, self.ctx.bootstrap) if owns(a.job_id)),
                          until=self.cursor.saved())  # a killed owner's unsaved turn: judged again, sent once
        book = self.incidents.book
        book.current = {k: i for k, i in book.current.items() if owns(i.job_id)}
        book.restore(i for i in read_incident_events(self.ctx.settings, self.ctx.bootstrap) if owns(i.job_id))

    def detect_once(self) -> int:
        """One turn of the detector loop; the number of alert and incident events published."""
        with self._turn_lock:
            if self.owner is not None and self.owner.changed != self._books_seen:
                try:
                    self._restore_owned()
                except Exception as exc:  # the topics cannot be read: no turn on books that may be stale
                    self.last_error = f"detect: restoring the books: {one_line(exc)}"
                    self._turn_failed = True
                    return 0
                self._books_seen = self.owner.changed
            published = self._detect_turn()
        if self.group is not None:  # the lease records `vigil status` reads (throttled; never raises), outside
            # the turn lock: a revocation waiting for it never waits on the broker for a view
            self.group.report(turn_at=self._turn_at, behind_s=self.cursor.behind_s, backlog=self.cursor.backlog,
                              jobs=self.cursor.owned_jobs())
        return published

    def _detect_turn(self) -> int:
        self._turn_failed = False
        self._turn_published = []
        before = self.alerts_published
        try:
            frontier = self.ingest.frontier if self.ingest is not None else None
            if self.ingest is not None and frontier is None and not self._unpublished:
                return 0  # no lag sample yet: nothing tells a silent source from a queued one
            topics = self.ingest.topic_frontiers if self.ingest is not None else None
            turned = self.cursor.turn(self.ctx.clickhouse, frontier=frontier, publish=self._publish, topics=topics)
            self._publish(turned)
            self.cursor.commit()
            self.detect_turns += 1
            self._turn_at = time.time()
            return self.alerts_published - before
        except Exception as exc:
            self.last_error = f"detect: {one_line(exc)}"
            log.exception("detector turn failed")
            self.cursor.backlog = 0
            self._turn_failed = True  # wait a whole interval before trying again
            return self.alerts_published - before  # a catch-up may have published its first rounds

    def _publish(self, alerts: Sequence[Event]) -> None:
        """Send `alerts` and the incident events raised with them, after any a failed send left."""
        events = self._unpublished + list(alerts) + list(self.incidents.drain())
        self._unpublished = events  # kept until the broker has them; ingest dedups a resend
        if events:
            self.producer.send(events)
            self.producer.flush()
        self._unpublished = []
        self.alerts_published += len(events)
        self._turn_published += events

    def stop(self) -> None:
        self._stop.set()
        self.announcer.stop()
        for t in self._threads:
            t.join(timeout=30)
        self._threads = []
        if self.group is not None:  # after the detect loop stopped: its last turn is saved, the others take over
            self.group.close()
            self.group = None
        try:
            self.producer.flush(10)
        except Exception as exc:
            log.warning("flushing alerts on stop: %s", exc)
        if self._metrics_server is not None:
            self._metrics_server.stop()

    @property
    def failed(self) -> str:
        """The error that stopped ingest ("" while it runs): the process should exit non-zero."""
        return self.ingest.failed if self.ingest is not None else ""

    def health(self) -> dict[str, Any]:
        ing = self.ingest
        stats = ing.stats if ing is not None else None
        errors = [e for e in (self.failed, self.last_error, ing.last_error if ing else "", stats.last_error if stats else "",
                              self.cursor.errors[-1] if self.cursor.errors else "") if e]
        alive = bool(self._threads) and all(t.is_alive() for t in self._threads)
        return {
            "ok": alive and not self.failed and (stats is None or stats.state != "retrying")
            and (stats is None or time.time() - stats.last_commit_ts < 600 or stats.events == 0),
            "ingest": stats.state if stats else "starting",
            "lag": dict(ing.lag) if ing else {},
            "events_per_s": round(ing.events_per_s, 1) if ing else 0.0,
            "events": stats.events if stats else 0,
            "rejected": stats.rejected if stats else 0,
            "duplicates_skipped": ing.writer.skipped_duplicates if ing else 0,
            "decode_process": ({"batches": ing.decoder.batches, "failures": ing.decoder.failures,
                                "restarts": ing.decoder.restarts, "offloaded_batches": ing.writer.offloaded_batches,
                                "fallback_batches": ing.writer.offload_fallbacks}
                               if ing is not None and ing.decoder is not None else None),
            "last_error": errors[0] if errors else "",
            "detect": self.settings.detect,
            "shard": describe(self.owner, self.cursor.owned_jobs()),
            "alerts_firing": len(self.book.firing()),
            "incidents_open": len(self.incidents.book.open()),
            "alerts_published": self.alerts_published,
            "detect_turns": self.detect_turns,
            "instants_judged": self.cursor.instants_judged,
            "instants_waited": self.cursor.instants_waited,
            "detect_backlog": self.cursor.backlog,
            "detect_behind_s": round(self.cursor.behind_s, 1),
            "metrics_url": self._metrics_server.url if self._metrics_server is not None else "",
        }

