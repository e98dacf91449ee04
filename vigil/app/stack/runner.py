"""The body of `vigil up`: broker, ClickHouse, topics, migrations, hosted services, control port.

Parts come up in dependency order and go down in reverse. The hosted services are the
`ServiceSpec`s given (by default every one in `vigil.app.components.SERVICES`). Before any of
them, the key set of every role is made in the key directory where missing (`vigil.signing`),
so the hosted services sign their decisions from the start.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client import CollectorRegistry

from vigil.app.components import SERVICES, migrate_all
from vigil.app.stack.control import ControlServer
from vigil.app.stack.state import StackState, clear_state, guard, read_state, write_state
from vigil.app.stack.store_health import StoreHealth
from vigil.clickhouse.client import check, connect
from vigil.errors import StackError
from vigil.kafka.admin import check_reachable, ensure_topics
from vigil.kafka.broker import EmbeddedBroker, port_open
from vigil.metrics import Metrics
from vigil.metrics.server import Union
from vigil.redact import shown_dsn
from vigil.service import Service, ServiceSpec, StackContext
from vigil.settings import VigilSettings
from vigil.signing.setup import key_store

log = logging.getLogger(__name__)

def prepare(settings: VigilSettings, bootstrap: str, *, rebuild: bool = False) -> StackContext:
    """Reach Kafka and ClickHouse, create missing topics, apply pending migrations: what every
    service needs before it starts, whether `vigil up` hosts it or it runs on its own. A
    migration that rebuilds tables holding rows is applied only with `rebuild` (`vigil up`,
    before it hosts any service); a service on its own refuses to start until `vigil migrate`
    has applied it."""
    check_reachable(settings, bootstrap)
    ensure_topics(settings, bootstrap)
    dsn = settings.effective_clickhouse_dsn
    client = connect(dsn, explicit=settings.clickhouse_dsn is not None)
    migrate_all(client, settings.retention_days, rebuild=rebuild)
    return StackContext(settings=settings, bootstrap=bootstrap, clickhouse=client, clickhouse_dsn=dsn)


def hosted_metrics(services: Sequence[Service]) -> CollectorRegistry:
    """One registry serving every hosted service's own (`metrics`, where it has one): the control port's /metrics."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(Union([m.registry for svc in services if isinstance(m := getattr(svc, "metrics", None), Metrics)]))
    return registry


@dataclass(kw_only=True)
class Stack:
    settings: VigilSettings
    services: Sequence[ServiceSpec] = SERVICES
    broker: EmbeddedBroker | None = None
    hosted: list[Service] = field(default_factory=list)
    control: ControlServer | None = None
    ctx: StackContext | None = None
    store_health: StoreHealth | None = None

    def start(self) -> StackState:
        s = self.settings
        if (running := read_state(s)) is not None:
            raise StackError(f"a stack is already running under VIGIL_HOME={s.home} (pid {running.pid}); `vigil down` first")
        keys = key_store(s.home)
        guard(s.home, keys.directory)  # another uid (a job under `vigil run --user`) reaches no key, no token
        keys.ensure()
        guard(s.home, keys.directory)
        try:
            return self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> StackState:
        s = self.settings
        if s.embedded_kafka:
            self.broker = EmbeddedBroker(port=s.broker_port, log_path=s.home / "broker.log")
            bootstrap = self.broker.start()
        else:
            bootstrap = str(s.kafka_bootstrap)
        self.ctx = prepare(s, bootstrap, rebuild=True)  # nothing of this stack ingests yet
        client = self.ctx.clickhouse
        self.store_health = StoreHealth(check=lambda: check(client), dsn=self.ctx.clickhouse_dsn)
        self.store_health.start()
        for spec in self.services:
            svc = spec.factory(self.ctx)
            svc.start()
            self.hosted.append(svc)
        self.control = ControlServer(port=s.control_port, dsn=self.ctx.clickhouse_dsn, health=self.health,
                                     migrate=self._migrate, metrics=hosted_metrics(self.hosted))
        self.control.start()
        urls = {str(k): str(v) for svc in self.hosted for k, v in self._health_of(svc).get("urls", {}).items()}
        state = StackState(
            pid=os.getpid(), bootstrap=bootstrap, clickhouse_dsn=shown_dsn(self.ctx.clickhouse_dsn), control_url=self.control.url,
            broker_pid=self.broker.pid if self.broker else None, urls=urls, token=self.control.token,
        )
        write_state(s, state)
        return state

    def _migrate(self) -> dict[str, Any]:
        assert self.ctx is not None
        return asdict(migrate_all(self.ctx.clickhouse, self.settings.retention_days, rebuild=False))  # it ingests

    @staticmethod
    def _health_of(svc: Service) -> dict[str, Any]:
        try:
            return svc.health()
        except Exception as exc:
            return {"ok": False, "error": str(exc)}

    def health(self) -> dict[str, Any]:
        parts: dict[str, dict[str, Any]] = {}
        if self.ctx is not None:
            host, _, port = self.ctx.bootstrap.rpartition(":")
            broker_ok = port_open(host, int(port)) if self.broker is None else self.broker.alive()
            parts["broker"] = {"ok": broker_ok, "bootstrap": self.ctx.bootstrap, "embedded": self.broker is not None}
            if self.store_health is not None:
                parts["clickhouse"] = self.store_health.report()
        for svc in self.hosted:
            parts[svc.name] = self._health_of(svc)
        metrics = f"{self.control.url}/metrics" if self.control is not None else ""
        return {"ok": all(p.get("ok") for p in parts.values()), "pid": os.getpid(), "parts": parts,
                "metrics_url": metrics}

    def stop(self) -> None:
        if self.control is not None:
            self.control.stop()
            self.control = None
        if self.store_health is not None:
            self.store_health.stop()
        for svc in reversed(self.hosted):
            try:
                svc.stop()
            except Exception as exc:
                log.error("stopping %s failed: %s", svc.name, exc)
        self.hosted.clear()
        if self.broker is not None:
            self.broker.stop()
            self.broker = None
        state = read_state(self.settings)
        if state is None or state.pid == os.getpid():
            clear_state(self.settings)

    def wait(self, stop: threading.Event) -> None:
        """Block until `stop` is set or the embedded broker dies."""
        while not stop.wait(1.0):
            if self.broker is not None and not self.broker.alive():
                log.error("embedded broker exited; stopping the stack")
                return


def wait_for_state(settings: VigilSettings, pid: int, timeout: float, alive: Callable[[], bool]) -> StackState:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        state = read_state(settings)
        if state is not None and state.pid == pid:
            return state
        if not alive():
            break
        time.sleep(0.1)
    raise StackError(f"the stack did not come up (see {settings.home / 'up.log'})")
