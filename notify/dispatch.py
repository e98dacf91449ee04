"""Delivering queued notifications: per receiver, in order, retried until delivered, failed or expired.

Each receiver has `concurrency` lanes (threads); a notification goes to the lane of its group
(a stable hash of the group key), so a group's notifications arrive in the order they were
decided (firing before its resolve), and with one lane, the default, everything to that
receiver does. A lane works on its oldest notification until it is done: a retryable failure
holds the lane (later ones wait behind it, which keeps the order) and is retried after an
exponential backoff with jitter. Every attempt's outcome is saved before the lane moves on;
when ClickHouse cannot take it the lane waits and saves again, so nothing delivered is ever
sent as new after a restart. The queue is bounded per receiver (`max_pending`): when it is
full the oldest waiting notification is dropped and recorded as such.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from vigil.errors import one_line
from vigil.notify.outbox import Delivery, Outbox
from vigil.notify.sender import Sender, backoff_s
from vigil.notify.settings import NotifySettings, Receiver

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class ReceiverStats:
    delivered: int = 0
    failed: int = 0
    expired: int = 0
    dropped: int = 0
    retries: int = 0
    last_error: str = ""
    last_delivered: float = 0.0


@dataclass(kw_only=True)
class Lane:
    receiver: Receiver
    queue: deque[Delivery] = field(default_factory=deque)
    busy: Delivery | None = None
    cond: threading.Condition = field(default_factory=threading.Condition)


class Dispatcher:
    def __init__(self, receivers: dict[str, Receiver], outbox: Outbox, sender: Sender, settings: NotifySettings,
                 clock: Callable[[], float] = time.time) -> None:
        self._receivers = receivers
        self._outbox = outbox
        self._sender = sender
        self._settings = settings
        self._clock = clock
        self._lanes = {name: [Lane(receiver=r) for _ in range(r.concurrency)] for name, r in receivers.items()}
        self.stats = {name: ReceiverStats() for name in receivers}
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def _now(self) -> datetime:
        return datetime.fromtimestamp(self._clock(), UTC)

    def start(self, pending: Sequence[Delivery] = ()) -> None:
        for d in pending:
            self.enqueue(d)
        self._stop.clear()
        for name, lanes in self._lanes.items():
            for i, lane in enumerate(lanes):
                t = threading.Thread(target=self._run, args=(lane,), name=f"notify-{name}-{i}", daemon=True)
                t.start()
                self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for lanes in self._lanes.values():
            for lane in lanes:
                with lane.cond:
                    lane.cond.notify_all()
        for t in self._threads:
            t.join(timeout=30)
        self._threads = []

    def alive(self) -> bool:
        return all(t.is_alive() for t in self._threads)

    def enqueue(self, d: Delivery) -> None:
        """Queue a saved notification; one of a receiver no longer configured is recorded as dropped."""
        lanes = self._lanes.get(d.receiver)
        if lanes is None:
            self._finish(d, "dropped", wait=False, error=f"receiver {d.receiver!r} is not configured any more")
            return
        if self.pending(d.receiver) >= self._receivers[d.receiver].max_pending:
            victim_lane = max(lanes, key=lambda ln: len(ln.queue) - (ln.busy is not None))
            with victim_lane.cond:
                waiting = [x for x in victim_lane.queue if x is not victim_lane.busy]
                if waiting:
                    victim_lane.queue.remove(waiting[0])
            if waiting:
                self._finish(waiting[0], "dropped", wait=False, error="queue full (max_pending)")
        lane = lanes[zlib.crc32(d.group_key.encode()) % len(lanes)]
        with lane.cond:
            lane.queue.append(d)
            lane.cond.notify()

    def pending(self, receiver: str) -> int:
        return sum(len(lane.queue) for lane in self._lanes.get(receiver, []))

    def oldest_failing(self, receiver: str) -> Delivery | None:
        """The oldest queued notification that has failed at least once (the receiver's backlog head)."""
        heads = [lane.queue[0] for lane in self._lanes.get(receiver, []) if lane.queue and lane.queue[0].attempts]
        return min(heads, key=lambda d: d.created, default=None)

    def _run(self, lane: Lane) -> None:
        while not self._stop.is_set():
            with lane.cond:
                while not lane.queue and not self._stop.is_set():
                    lane.cond.wait(1.0)
                if self._stop.is_set():
                    return
                lane.busy = lane.queue[0]
            try:
                done = self._deliver(lane.receiver, lane.busy)
            except Exception as exc:  # a bug must not kill the lane: record it and try again later
                log.exception("notify lane %s failed", lane.receiver.name)
                self.stats[lane.receiver.name].last_error = f"internal: {one_line(exc)}"
                done = False
                self._stop.wait(self._settings.retry_max_s)
            with lane.cond:
                if done and lane.queue and lane.queue[0] is lane.busy:
                    lane.queue.popleft()
                lane.busy = None

    def _deliver(self, r: Receiver, d: Delivery) -> bool:
        """Attempt until done (True) or stopped (False)."""
        stats = self.stats[r.name]
        while not self._stop.is_set():
            now = self._clock()
            if now - d.created.timestamp() > self._settings.max_age_s:
                return self._finish(d, "expired", error=f"undelivered after {self._settings.max_age_s:g} s: {d.error}")
            out = self._sender.send(r, d.key, d.body.encode())
            attempts = d.attempts + 1
            if out.verdict == "delivered":
                stats.delivered += 1
                stats.last_delivered = self._clock()
                return self._finish(d, "delivered", attempts=attempts, http_status=out.http_status, error="",
                                    latency_ms=round((self._clock() - d.created.timestamp()) * 1000, 1))
            stats.last_error = f"{d.key}: {out.error}"
            if out.verdict == "failed":
                stats.failed += 1
                log.error("notification %s to %s refused for good (not retried): %s", d.key, r.name, out.error)
                return self._finish(d, "failed", attempts=attempts, http_status=out.http_status, error=out.error)
            stats.retries += 1
            delay = backoff_s(attempts, self._settings.retry_base_s, self._settings.retry_max_s)
            if out.retry_after_s is not None:
                delay = min(max(delay, out.retry_after_s), self._settings.retry_max_s)
            log.warning("notification %s to %s: attempt %d failed (%s); retrying in %.1f s",
                        d.key, r.name, attempts, out.error, delay)
            if not self._save(d, attempts=attempts, http_status=out.http_status, error=out.error):
                return False
            self._stop.wait(delay)
        return False

    def _finish(self, d: Delivery, state: str, wait: bool = True, **changes: Any) -> bool:
        if state in ("expired", "dropped"):
            stats = self.stats.get(d.receiver)
            if stats is not None:
                setattr(stats, state, getattr(stats, state) + 1)
            log.error("notification %s to %s %s: %s", d.key, d.receiver, state, changes.get("error", ""))
        return self._save(d, wait=wait, state=state, **changes)

    def _save(self, d: Delivery, wait: bool = True, **changes: Any) -> bool:
        """Record the next revision, waiting out ClickHouse failures (unless not `wait`); False when not saved."""
        d.revise(self._now(), **changes)
        while True:
            try:
                self._outbox.save([d])
                return True
            except Exception as exc:
                log.error("saving the delivery state of %s failed%s: %s", d.key, ", retrying" if wait else "",
                          one_line(exc))
                if not wait or self._stop.wait(self._settings.retry_base_s):
                    return False
