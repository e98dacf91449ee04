"""Services on the log: each announces its metrics URL (`ServiceAnnouncement`), `vigil status` reads them back.

`Announcer` publishes `up` when its service starts and again every `interval_s` (so a reader of a
topic with retention always finds a recent one), and `down` when it stops. It never raises into
its service: a broker that does not take an announcement is logged and tried at the next interval.
A metrics server bound to every address (`0.0.0.0`, `::`) is announced under this host's name.

`read_services` reads the `services` topic to its end and keeps the newest announcement per
(kind, instance), at most `MAX_INSTANCES` of them (the oldest dropped): bounded whatever the log holds.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable
from datetime import datetime
from urllib.parse import urlsplit, urlunsplit

from confluent_kafka import KafkaException

from vigil.contract.base import utcnow
from vigil.contract.services import SERVICE_JOB, SERVICES_TOPIC, ServiceAnnouncement, ServiceKind
from vigil.errors import VigilError
from vigil.kafka.admin import ensure_topics
from vigil.kafka.producer import EventProducer
from vigil.kafka.reader import read_events
from vigil.settings import VigilSettings

log = logging.getLogger(__name__)
INTERVAL_S = 300.0
MAX_INSTANCES = 512
_ANY = {"0.0.0.0", "::", ""}


def reachable(url: str) -> str:
    """`url` with a wildcard bind address replaced by this host's name."""
    parts = urlsplit(url)
    if not url or (parts.hostname or "") not in _ANY:
        return url
    port = f":{parts.port}" if parts.port else ""
    return urlunsplit((parts.scheme, f"{socket.gethostname()}{port}", parts.path, parts.query, parts.fragment))


class Announcer:
    def __init__(self, settings: VigilSettings, bootstrap: str, service: ServiceKind, *,
                 metrics_url: Callable[[], str], instance: str = "", interval_s: float = INTERVAL_S) -> None:
        self.settings, self.bootstrap, self.service = settings, bootstrap, service
        self.host = socket.gethostname()[:256] or "localhost"
        self.instance = (instance or f"{self.host}:{os.getpid()}")[:128]
        self.interval_s = interval_s
        self._metrics_url = metrics_url
        self._started_at = utcnow()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._producer: EventProducer | None = None
        self.sent = 0

    def start(self) -> None:
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name=f"announce-{self.service}", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """`down`, when an `up` went out (a broker never reached is not waited for again)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
            self._thread = None
        if self.sent:
            self.announce("down", flush_s=2.0)

    def announce(self, state: str, flush_s: float = 10.0) -> bool:
        try:
            if self._producer is None:
                try:
                    ensure_topics(self.settings, self.bootstrap, [SERVICES_TOPIC])
                except VigilError as exc:  # no right to create topics (ACLs): an admin made it, or sending fails
                    log.info("%s: services topic not ensured: %s", self.service, exc)
                self._producer = EventProducer(settings=self.settings, bootstrap=self.bootstrap)
            event = ServiceAnnouncement(job_id=SERVICE_JOB, host=self.host, ts=utcnow(), service=self.service,
                                        instance=self.instance, state=state,  # type: ignore[arg-type]
                                        metrics_url=reachable(self._metrics_url()), interval_s=self.interval_s,
                                        started_at=self._started_at)
            self._producer.send([event])
            self._producer.flush(flush_s)
        except (VigilError, ValueError, RuntimeError, KafkaException) as exc:
            log.warning("%s: announcement (%s) not published: %s", self.service, state, exc)
            return False
        self.sent += 1
        return True

    def _run(self) -> None:
        while True:
            self.announce("up")
            if self._stop.wait(self.interval_s):
                return


def read_services(settings: VigilSettings, bootstrap: str, timeout: float = 10.0) -> list[ServiceAnnouncement]:
    """The newest announcement of each (kind, instance), newest first; at most `MAX_INSTANCES`."""
    newest: dict[tuple[str, str], ServiceAnnouncement] = {}
    for e in read_events(settings, bootstrap, SERVICES_TOPIC, ServiceAnnouncement, timeout=timeout):
        key = (str(e.service), e.instance)
        held = newest.get(key)
        if held is None or e.ts >= held.ts:
            newest[key] = e
        if len(newest) > MAX_INSTANCES:
            oldest = min(newest, key=lambda k: newest[k].ts)
            del newest[oldest]
    return sorted(newest.values(), key=lambda e: e.ts, reverse=True)


def age_s(e: ServiceAnnouncement, now: datetime) -> float:
    return max(0.0, (now - e.ts).total_seconds())
