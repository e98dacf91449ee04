"""RecoveryService: the controller as a long-running service (`vigil recovery run`, or hosted by `vigil up`).

`start()` makes sure its topics exist, then runs two threads. The **loop** follows the log
(incidents, alerts, the `recovery` and `commands` topics, from the beginning: `Follower`)
into the `ClusterState` and, every `tick_s`, lets the `Engine` take the next steps — only
while this instance holds the lease, has read the log to its end once, and has led for a
moment (so it has read what a previous leader published last). The **lease** thread keeps
the group membership that makes exactly one instance the leader (`controller.lease`); the
others fold the same log and take over within seconds of the leader's death. `health()` is
cheap: figures the loop keeps.

Signing (`vigil.signing`): everything the controller publishes is signed with the controller
key and carries its lease epoch; what it folds passes its `Gate` first, so incidents, alerts,
operator requests, approvals and controller steps that are not signed by the role that may make
them never reach the state, nor, once this instance has led for a moment, controller steps of an
older lease epoch than its own (a deposed leader's late steps), nor, once it has read the log to its end, a
decision past its signed bound (`vigil.signing.freshness`: a genuine decision re-published later): they are counted
(`health()["refused"]`), logged, and raised once per kind and job as a `security` alert. So are a `member` dated ahead (refused by the contract)
and a checkpoint that failed verification, once per kind, job and host (`controller.claims`).
"""

from __future__ import annotations

import logging
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

from vigil.contract.services import ServiceKind
from vigil.errors import one_line
from vigil.kafka.admin import ensure_topics
from vigil.kafka.announce import Announcer
from vigil.kafka.follow import Follower
from vigil.kafka.producer import EventProducer
from vigil.metrics.server import MetricsServer
from vigil.recovery.backends import NodeBackend, select
from vigil.recovery.controller.claims import Claims
from vigil.recovery.controller.compaction import Retention
from vigil.recovery.controller.effects import KafkaEffects
from vigil.recovery.controller.engine import Engine
from vigil.recovery.controller.lease import Lease
from vigil.recovery.controller.metrics import RecoveryMetrics
from vigil.recovery.controller.state import INPUT_TOPICS, ClusterState
from vigil.recovery.settings import RecoverySettings
from vigil.settings import VigilSettings
from vigil.signing import Role
from vigil.signing.gate import Gate
from vigil.signing.policy import Refusals
from vigil.signing.setup import signer, verifier

log = logging.getLogger(__name__)
SETTLE_AFTER_LEASE_S = 1.0


class RecoveryService:
    name = "recovery"

    def __init__(self, settings: VigilSettings, bootstrap: str, recovery: RecoverySettings | None = None,
                 backend: NodeBackend | None = None) -> None:
        self.core, self.bootstrap = settings, bootstrap
        self.settings = recovery or RecoverySettings.load()
        self.backend = backend or select(self.settings, settings)
        # executed request ids kept as long as the topic keeps the requests (`compaction`)
        self.state = ClusterState(retention=Retention(keep_request_ids=timedelta(
            milliseconds=settings.topic_retention_ms)))
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.follower: Follower | None = None
        self.lease: Lease | None = None
        self.engine: Engine | None = None
        self.last_error = ""
        self._lead_since: float | None = None
        self.gate = Gate(verifier=verifier(settings.home), refusals=Refusals(reporter="controller"))
        self.claims = Claims(refusals=self.gate.refusals)
        self._producer: EventProducer | None = None
        self.metrics = RecoveryMetrics()
        self.metrics.source = self
        self._metrics_server = MetricsServer(self.metrics.registry, bind=self.metrics.settings.bind,
                                             port=self.settings.metrics_port) if self.metrics.settings.enabled else None
        self.announcer = Announcer(settings, bootstrap, ServiceKind.CONTROLLER,
                                   metrics_url=lambda: self._metrics_server.url if self._metrics_server else "")

    def start(self) -> None:
        ensure_topics(self.core, self.bootstrap, INPUT_TOPICS)
        producer = EventProducer(settings=self.core, bootstrap=self.bootstrap, batch_events=200,
                                 signer=signer(Role.CONTROLLER, self.core.home))
        self._producer = producer
        self.engine = Engine(state=self.state, settings=self.settings,
                             fx=KafkaEffects(producer=producer, backend=self.backend))
        self.follower = Follower(settings=self.core, bootstrap=self.bootstrap, topics=INPUT_TOPICS)
        self.lease = Lease(settings=self.core, bootstrap=self.bootstrap, group=self.settings.lease_group)
        if self._metrics_server is not None:
            self._metrics_server.start()
        self.announcer.start()
        self._stop.clear()
        self._threads = [threading.Thread(target=self._loop, name="recovery-loop", daemon=True),
                         threading.Thread(target=self._hold_lease, name="recovery-lease", daemon=True)]
        for t in self._threads:
            t.start()
        log.info("recovery controller started (mode %s, backend %s)", self.settings.mode, self.backend.name)

    def _hold_lease(self) -> None:
        assert self.lease is not None
        while not self._stop.is_set():
            try:
                self.lease.poll(0.5)
            except Exception as exc:
                self.last_error = f"lease: {one_line(exc)}"
                self._stop.wait(1.0)

    def _loop(self) -> None:
        assert self.follower is not None and self.engine is not None and self.lease is not None
        next_tick = 0.0
        while not self._stop.is_set():
            # a leader that has read the log to its end and what its predecessor published before the
            # takeover refuses that predecessor's later steps; history of every epoch is folded before
            settled = self.lease.leading and self.follower.caught_up and self._lead_since is not None and \
                time.monotonic() - self._lead_since >= SETTLE_AFTER_LEASE_S
            self.gate.step_floor = self.lease.epoch if settled else 0
            try:
                seen_at = datetime.now(UTC)
                # rebuilding from the log folds every genuine decision; once caught up, a decision past its
                # signed bound (a genuine one re-published later) is refused, never folded nor acted on
                accepted, alerts = self.gate.admit(self.follower.poll(0.1), seen_at, acting=self.follower.caught_up)
                alerts += self.claims.review(accepted, self.follower.take_ahead(), seen_at)
                self.state.apply(accepted)
                self.metrics.folded(accepted, leading=settled, class_of=self._class_of)
                if alerts and self._producer is not None:
                    self._producer.send(alerts)
            except Exception as exc:
                self.last_error = f"follow: {one_line(exc)}"
                self._stop.wait(1.0)
                continue
            if not self.lease.leading:
                self._lead_since = None
                continue
            now = time.monotonic()
            self._lead_since = self._lead_since or now
            self.engine.epoch = self.lease.epoch
            if not self.follower.caught_up or now - self._lead_since < SETTLE_AFTER_LEASE_S or now < next_tick:
                continue
            next_tick = now + self.settings.tick_s
            self.engine.tick(datetime.now(UTC))

    def _class_of(self, case_id: str) -> str:
        case = self.state.cases.get(case_id)
        return case.cls if case is not None else ""

    def stop(self) -> None:
        self._stop.set()
        self.announcer.stop()
        for t in self._threads:
            t.join(timeout=15)
        self._threads = []
        if self.lease is not None:
            self.lease.close()
        if self.follower is not None:
            self.follower.close()
        if self._metrics_server is not None:
            self._metrics_server.stop()

    def health(self) -> dict[str, Any]:
        alive = bool(self._threads) and all(t.is_alive() for t in self._threads)
        engine = self.engine
        errors = [e for e in (self.last_error, engine.last_error if engine else "") if e]
        return {
            "ok": alive, "leading": bool(self.lease and self.lease.leading),
            "caught_up": bool(self.follower and self.follower.caught_up), "mode": self.settings.mode,
            "backend": self.backend.name, "jobs": sum(1 for j in self.state.jobs.values() if j.members),
            "open_recoveries": sum(1 for c in self.state.cases.values() if c.open),
            "events": self.state.applied, "turns": engine.turns if engine else 0,
            "refused": self.gate.refused, "epoch": self.lease.epoch if self.lease else 0,
            "last_error": errors[0] if errors else "",
            "metrics_url": self._metrics_server.url if self._metrics_server is not None else "",
        }
