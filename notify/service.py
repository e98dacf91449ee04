"""NotifyService: alerts and incidents in, notifications to on-call out, each decided once and delivered once.

    start()   in a background thread: read the notification log and the undelivered queue back
              from ClickHouse, fold the alerts, incidents and silences topics from the beginning
              (state.py), then run three parts:
                consumer  its own group over alerts, incidents, silences; each batch is folded,
                          planned, and the decisions saved (outbox.py) before the offsets commit
                planner   every `tick_s`: what became due (group wait, group interval, repeat)
                lanes     per receiver, deliver the queue in order (dispatch.py)
    health()  {"ok", "receivers": {name: {pending, delivered, failed, ...}}, "groups_firing", ...}

Decisions are compared against the notification log, not derived from events one by one, so a
batch read twice (a crash between the save and the commit) or a restart decides nothing twice;
deliveries that did not finish before a crash are sent again after it with the same
`Idempotency-Key`. Exactly one notifier runs per cluster (it owns the delivery queue).

Alerts, incidents and silences pass a `vigil.signing` gate first, on restore and live: one not
signed by the role that may make it (analyzer alerts and incidents, operator silences) is never
folded, so a forged silence mutes nothing and a forged incident pages nobody; it is counted
(`health()["refused"]`), logged, and raised once per kind and job as a `security` alert (which
pages: security alerts are claims, acted on unsigned). Live, a decision past its signed bound
(`vigil.signing.freshness`: a genuine alert or incident re-published after the log moved on) is refused
the same way; the restore folds every genuine one whatever its age (rebuilding is not acting).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from vigil.contract import Event, Silence
from vigil.contract.services import ServiceKind
from vigil.contract.wire import decode_batch
from vigil.errors import one_line
from vigil.kafka.announce import Announcer
from vigil.kafka.consumer import BatchId, BatchingConsumer, Unstorable
from vigil.kafka.deadletter import DeadLetter, KafkaDeadLetters
from vigil.kafka.lag import LagProbe
from vigil.kafka.producer import EventProducer
from vigil.kafka.reader import read_topics
from vigil.metrics.server import MetricsServer
from vigil.notify.chain import notify_chain
from vigil.notify.decider import Decider
from vigil.notify.dispatch import Dispatcher
from vigil.notify.formats import render
from vigil.notify.links import Links
from vigil.notify.metrics import NotifyMetrics
from vigil.notify.outbox import Delivery, Outbox
from vigil.notify.sender import HttpSender, Sender
from vigil.notify.settings import NotifySettings
from vigil.service import StackContext
from vigil.settings import VigilSettings
from vigil.signing.gate import Gate
from vigil.signing.policy import Refusals
from vigil.signing.setup import verifier

log = logging.getLogger(__name__)

TOPICS: tuple[str, ...] = ("alerts", "incidents", "silences")
OWN_TOPICS = ("silences",)  # the analyzer ingests (and dead-letters) the alerts topic; these are ours alone


class _DeadLetters:
    """Dead-letters bad records of the notifier's own topics; counts the rest (their ingest dead-letters them)."""

    def __init__(self, producer: EventProducer, settings: VigilSettings) -> None:
        self._inner = KafkaDeadLetters(producer)
        self._own = {settings.topic(t) for t in OWN_TOPICS}
        self.count = 0

    def write(self, letters: Sequence[DeadLetter]) -> None:
        self.count += sum(d.count for d in letters)
        for d in letters:
            log.warning("notify: rejected input from %s[%d]@%d: %s", d.topic, d.partition, d.offset, d.reason)
        self._inner.write([d for d in letters if d.topic in self._own])


class NotifyService:
    name = "notify"

    def __init__(self, ctx: StackContext, settings: NotifySettings | None = None, *, sender: Sender | None = None,
                 clock: Callable[[], float] = time.time, dashboard_base: str = "") -> None:
        self.ctx = ctx
        self.settings = settings or NotifySettings.load()
        self.receivers = self.settings.resolved_receivers()
        links = Links(self.settings.dashboard_url or dashboard_base)
        self.decider = Decider(settings=self.settings, links=links)
        self.outbox = Outbox(ctx.clickhouse)
        self.clock = clock
        self._http = HttpSender()
        self.dispatcher = Dispatcher(self.receivers, self.outbox, sender or self._http, self.settings, clock)
        self._pending: list[Delivery] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.consumer: BatchingConsumer | None = None
        self.lag = LagProbe(settings=ctx.settings, bootstrap=ctx.bootstrap, group_id=self.settings.group_id,
                            topics=TOPICS)
        self.gate = Gate(verifier=verifier(ctx.settings.home), refusals=Refusals(reporter="notifier"))
        self._security: list[Event] = []
        self._restored: dict[tuple[str, int], int] = {}  # partition -> the last offset `restore` folded
        self._producer: EventProducer | None = None
        self.ready = threading.Event()
        self.decided = 0
        self.ticks = 0
        self.last_error = ""
        self._dead: _DeadLetters | None = None
        self.metrics = NotifyMetrics()
        self.metrics.source = self
        self._metrics_server = MetricsServer(self.metrics.registry, bind=self.metrics.settings.bind,
                                             port=self.settings.metrics_port) if self.metrics.settings.enabled else None
        self.announcer = Announcer(ctx.settings, ctx.bootstrap, ServiceKind.NOTIFIER,
                                   metrics_url=lambda: self._metrics_server.url if self._metrics_server else "")

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.start()
        self.announcer.start()
        self._stop.clear()
        main = threading.Thread(target=self._main, name="notify-main", daemon=True)
        main.start()
        self._threads = [main]

    def _main(self) -> None:
        while True:
            try:
                self.restore()
                break
            except Exception as exc:  # Kafka or ClickHouse not there yet: try again
                self.last_error = f"restore: {one_line(exc)}"
                log.error("notify: restoring state failed, retrying: %s", one_line(exc))
                self.decider = Decider(settings=self.settings, links=self.decider.links)
                if self._stop.wait(self.settings.retry_max_s):
                    return
        self.last_error = ""
        producer = EventProducer(settings=self.ctx.settings, bootstrap=self.ctx.bootstrap)
        self._producer = producer
        self._dead = _DeadLetters(producer, self.ctx.settings)
        self.consumer = BatchingConsumer(settings=self.ctx.settings, bootstrap=self.ctx.bootstrap,
                                         group_id=self.settings.group_id, topics=TOPICS, writer=self,
                                         dead_letters=self._dead, max_batch_s=0.2, max_batch_events=5000,
                                         chain=notify_chain)
        self.dispatcher.start(self._pending)
        for target, name in ((self.consumer.run, "notify-consumer"), (self.lag.run, "notify-lag")):
            t = threading.Thread(target=target, args=(self._stop,), name=name, daemon=True)
            t.start()
            self._threads.append(t)
        self.ready.set()
        while not self._stop.wait(self.settings.tick_s):
            self.tick()

    def restore(self) -> None:
        """The notification log and queue from ClickHouse, then the topics folded from the beginning."""
        d = self.decider
        for group_key, receiver, sent in self.outbox.load_log():
            d.log.record(group_key, receiver, sent)
        self._pending = self.outbox.load_pending()
        for s in self.outbox.load_silences():
            d.state.apply(s)
        topics = [self.ctx.settings.topic(t) for t in TOPICS]
        for rec in read_topics(self.ctx.settings, self.ctx.bootstrap, topics, timeout=300):
            # rebuilding is not acting: every genuine decision is folded, whatever its age
            self._restored[(rec.topic, rec.partition)] = max(rec.offset, self._restored.get((rec.topic, rec.partition), -1))
            accepted, alerts = self.gate.admit(decode_batch(rec.value).events, datetime.now(UTC), acting=False)
            self._security += alerts
            for e in accepted:
                d.state.apply(e)
        log.info("notify: restored %d alerts, %d incidents, %d silences, %d log entries, %d undelivered",
                 len(d.state.alerts), len(d.state.incidents), len(d.state.silences.silences), len(d.log.entries),
                 len(self._pending))

    def stop(self) -> None:
        self._stop.set()
        self.announcer.stop()
        for t in self._threads:
            t.join(timeout=30)
        self._threads = []
        self.dispatcher.stop()
        self._http.close()
        if self._metrics_server is not None:
            self._metrics_server.stop()

    # -- the consumer's writer, and the planner --------------------------------------------------------

    def write(self, events: Sequence[Event], batch: BatchId | None = None) -> Sequence[Unstorable]:
        """Fold a batch and save what it makes due; the consumer commits only after this returns."""
        with self._lock:
            accepted, alerts = self.gate.admit(events, datetime.now(UTC), acting=not self._folded(batch))
            self._security += alerts
            for e in accepted:
                self.decider.state.apply(e)
            self.outbox.mirror([e for e in accepted if isinstance(e, Silence)])  # again on a retry: it dedups
            self._plan()
        return []

    def _folded(self, batch: BatchId | None) -> bool:
        """Every record of `batch` is one `restore` folded already (the group re-reads from its committed offsets
        what restore read to the end): folding it again is not acting on it, so an old alert there is no replay."""
        return batch is not None and bool(batch.ranges) and all(
            r.last <= self._restored.get((r.topic, r.partition), -1) for r in batch.ranges)

    def tick(self) -> None:
        try:
            with self._lock:
                alerts, self._security = self._security, []
            if alerts and self._producer is not None:
                self._producer.send(alerts)  # read back from the alerts topic: they page like any alert
            with self._lock:
                self.decider.prune(self.clock(), self.settings.resolved_keep_s)
                self._plan()
            self.ticks += 1
            self.last_error = ""
        except Exception as exc:  # ClickHouse down: nothing was decided, the next tick tries again
            self.last_error = f"plan: {one_line(exc)}"
            log.error("notify: planning failed, retrying next tick: %s", one_line(exc))

    def _plan(self) -> None:
        due = self.decider.decide(self.clock())
        if not due:
            return
        deliveries = []
        for n in due:
            r = self.receivers.get(n.receiver)
            kind = r.kind if r is not None else "webhook"
            deliveries.append(Delivery.of(n, kind, render(kind, n.doc)))
        self.outbox.save(deliveries)  # raises while ClickHouse fails: nothing recorded, decided again later
        self.decider.record(due)
        for n, delivery in zip(due, deliveries, strict=True):
            self.dispatcher.enqueue(delivery)
            log.info("notify: %s %s -> %s (%s, key %s)", n.status, n.title, n.receiver, n.reason, n.key)
        self.decided += len(due)

    # -- status ----------------------------------------------------------------------------------------

    def silences_active(self) -> int:
        return len(self.decider.state.silences.active(datetime.fromtimestamp(self.clock(), UTC)))

    def health(self) -> dict[str, Any]:
        now = self.clock()
        receivers: dict[str, Any] = {}
        stuck: list[str] = []
        for name, r in self.receivers.items():
            st = self.dispatcher.stats[name]
            head = self.dispatcher.oldest_failing(name)
            behind = now - head.created.timestamp() if head is not None else 0.0
            if behind > self.settings.stuck_after_s:
                stuck.append(f"receiver {name} ({r.where}) failing for {behind:.0f} s: {head.error if head else ''}")
            receivers[name] = {"kind": r.kind, "where": r.where, "signed": r.secret is not None,
                               "pending": self.dispatcher.pending(name), "delivered": st.delivered, "failed": st.failed,
                               "retries": st.retries, "expired": st.expired, "dropped": st.dropped,
                               "last_error": st.last_error}
        alive = bool(self._threads) and all(t.is_alive() for t in self._threads) and self.dispatcher.alive()
        stats = self.consumer.stats if self.consumer else None
        errors = [e for e in (self.last_error, stats.last_error if stats else "", *stuck) if e]
        out: dict[str, Any] = {
            # not ok: a thread died, a receiver keeps failing, or the state could not be restored (yet)
            "ok": alive and not stuck and (self.ready.is_set() or not self.last_error),
            "ready": self.ready.is_set(), "receivers": receivers,
            "routes": len(self.settings.routes), "group_wait_s": self.settings.group_wait_s,
            "events": stats.events if stats else 0,
            "rejected": stats.rejected if stats else 0, "lag": sum(self.lag.lag.values()),
            "groups_firing": self.decider.groups_firing, "decided": self.decided, "ticks": self.ticks,
            "refused": self.gate.refused,
            "silences_active": self.silences_active(),
            "metrics_url": self._metrics_server.url if self._metrics_server is not None else "",
            "last_error": errors[0] if errors else "",
        }
        if not self.receivers:
            out["note"] = "no receivers configured (VIGIL_NOTIFY_WEBHOOK_URL or [notify.receivers] in VIGIL_CONFIG)"
        return out
