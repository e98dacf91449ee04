"""Shipping: sources (the outbox, the timer's spool files) -> sink, offsets committed after delivery.

Each round polls every source for a share of `max_events`, delivers them in one call
and, only once the sink confirmed, commits each source's cursor and persists the
positions. A failed delivery rewinds every source to its committed position and
backs off; the same events go again later, in order. Malformed lines are skipped,
counted and logged; they never stop the shipper.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from vigil.collector.outbox import Outbox, OutboxBatch
from vigil.collector.sink import Sink
from vigil.collector.spoolguard import SpoolGuard
from vigil.collector.tailer import Tailer
from vigil.contract import Event, validate_event

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Polled:
    events: list[Event]
    cursor: Any


class Source(Protocol):
    name: str

    def poll(self, max_events: int) -> Polled: ...
    def commit(self, cursor: Any) -> None: ...
    def rewind(self) -> None: ...
    def state(self) -> Any: ...


@dataclass(kw_only=True)
class LineDecoder:
    """JSON line -> validated event; bad lines are counted and logged (first, then every 100th)."""

    malformed: int = 0
    last_error: str = ""

    def decode(self, line: bytes, origin: str) -> Event | None:
        try:
            doc = json.loads(line)
            if not isinstance(doc, dict) or not isinstance(doc.get("kind"), str):
                raise ValueError("not a JSON object with a string 'kind'")
            version = doc.get("schema_version")
            return validate_event(doc["kind"], doc, version if isinstance(version, int) else None)
        except ValueError as exc:  # JSONDecodeError and validation errors are ValueErrors
            self.malformed += 1
            self.last_error = f"{origin}: {exc}"
            if self.malformed == 1 or self.malformed % 100 == 0:
                log.warning("skipping malformed line (%d so far) in %s: %s", self.malformed, origin, str(exc)[:300])
            return None


@dataclass(kw_only=True)
class OutboxSource:
    outbox: Outbox
    decoder: LineDecoder
    name: str = "outbox"

    def poll(self, max_events: int) -> Polled:
        batch = self.outbox.poll(max_events)
        events = [e for ln in batch.lines if (e := self.decoder.decode(ln, "outbox")) is not None]
        return Polled(events=events + batch.memory, cursor=batch)

    def commit(self, cursor: Any) -> None:
        assert isinstance(cursor, OutboxBatch)
        self.outbox.commit(cursor)

    def rewind(self) -> None:
        self.outbox.rewind()

    def state(self) -> Any:
        return self.outbox.cursor()


@dataclass(kw_only=True)
class SpoolSource:
    """The training side's JSON-lines files, shipped as they are (they carry their own event_ids)
    once `guard` admitted them: only the training side's kinds, naming this agent's job and host.
    The guard's `security` alerts for what it refused go to `alerts` (the agent's outbox: they
    survive a failed delivery of the lines, which are read again)."""

    tailer: Tailer
    decoder: LineDecoder
    guard: SpoolGuard
    alerts: Callable[[Sequence[Event]], None] | None = None
    attest: Callable[[Event], Event] | None = None  # the agent's host key on its job's checkpoint lines (if any)
    scan_interval_s: float = 0.5
    name: str = "spool"
    scanned_at: float = field(default=0.0, init=False)  # monotonic time the last scan began
    _next_scan: float = field(default=0.0, init=False)

    def poll(self, max_events: int) -> Polled:
        now = time.monotonic()
        if now >= self._next_scan:
            self.tailer.scan()
            self.scanned_at = now
            self._next_scan = now + self.scan_interval_s
        events: list[Event] = []
        cursor: dict[str, int] = {}
        for chunk in self.tailer.read_lines(max_events):
            origin = chunk.file.path.name
            events += [e for ln in chunk.lines if ln.strip() and (e := self.decoder.decode(ln, origin)) is not None
                       and self.guard.admit(e, origin)]
            cursor[chunk.file.key] = chunk.end
        if self.attest is not None:
            events = [self.attest(e) for e in events]
        raised = self.guard.drain()
        if raised and self.alerts is not None:
            self.alerts(raised)
        return Polled(events=events, cursor=cursor)

    def rescan(self) -> None:
        """Make the next `poll` look at the files again, whenever they were last looked at: the agent's last drain
        must read what the training side wrote (a new file, lines appended) since the last timed scan."""
        self._next_scan = 0.0

    def commit(self, cursor: Any) -> None:
        self.tailer.commit(cursor)

    def rewind(self) -> None:
        self.tailer.rewind()

    def state(self) -> Any:
        return self.tailer.state()


@dataclass(kw_only=True)
class Shipper:
    sources: Sequence[Source]
    sink: Sink
    store: Any  # OffsetStore (save(**parts))
    max_events: int = 2000
    idle_s: float = 0.5
    max_backoff_s: float = 5.0
    delivered: int = 0
    failures: int = 0
    last_error: str = ""
    healthy: bool = True
    _backoff: float = field(default=0.5, init=False)
    _saved: dict[str, Any] = field(default_factory=dict, init=False)

    def ship_once(self) -> int:
        """One round; returns events delivered (0: nothing to do), or -1 when delivery failed."""
        share = max(1, self.max_events // max(1, len(self.sources)))
        polled = [(src, src.poll(share)) for src in self.sources]
        events = [e for _, p in polled for e in p.events]
        if events:
            try:
                self.sink.deliver(events)
            except Exception as exc:  # DeliveryError, Unreachable, StackError, librdkafka trouble
                for src, _ in polled:
                    src.rewind()
                self.failures += 1
                self.last_error = str(exc)[:500]
                if self.healthy or self.failures % 60 == 0:
                    log.warning("delivery of %d events failed (%s); they stay spooled, retrying",
                                len(events), self.last_error)
                self.healthy = False
                return -1
        for src, p in polled:
            src.commit(p.cursor)
        state = {src.name: src.state() for src in self.sources}
        if state != self._saved:
            self.store.save(**state)
            self._saved = state
        if events:
            if not self.healthy:
                log.info("delivery recovered")
            self.healthy = True
            self.delivered += len(events)
        return len(events)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            n = self._round()
            if n < 0:
                stop.wait(self._backoff)
                self._backoff = min(self.max_backoff_s, self._backoff * 2)
            elif n < self.max_events // 2:
                self._backoff = 0.5
                stop.wait(self.idle_s)

    def drain(self, timeout_s: float) -> bool:
        """Ship until nothing is left or `timeout_s` passed; True when everything went."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            n = self._round()
            if n == 0:
                return True
            if n < 0:
                time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))
        return False

    def _round(self) -> int:
        try:
            return self.ship_once()
        except Exception:  # never let the shipper thread die
            log.exception("shipper round failed")
            for src in self.sources:
                src.rewind()
            return -1
