"""Retry: a batch's write and commit, attempted until done; only transient failures are retried.

A transient failure (`vigil.kafka.failures.is_transient`: the store or the broker unreachable or busy, a timeout)
is retried with exponential backoff, the same batch under the same id (a no-op where it got through), while the
group is kept alive (`Idle`: the partitions paused, the group polled, what it hands over kept for later);
`stats.state` says "retrying" with the error. Anything else raises `ConsumerFailed` with the cause chained. A
rebalance during the retries (`revoked`) ends them: the partitions' next owner reads the batch again. A stop during
the retries leaves it unwritten (`attempt` says False): nothing after it may be committed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from vigil.errors import one_line
from vigil.kafka.failures import ConsumerFailed, is_transient
from vigil.kafka.stats import ConsumerStats

log = logging.getLogger(__name__)


class Idle(Protocol):
    """The group kept alive while a batch is retried."""

    def pause(self) -> bool:
        """Stop fetching every assigned partition; False when none is assigned (asked again next time)."""

    def keep_alive(self, timeout: float) -> None:
        """Poll the group for `timeout` seconds (records it hands over are kept for later)."""

    def resume(self) -> None:
        """Fetch again what `pause` paused."""


@dataclass(kw_only=True)
class Retry:
    stats: ConsumerStats
    backoff_s: float
    max_backoff_s: float
    retrying: bool = False  # a batch's write is failing: nothing read after it may be committed
    revoked: bool = False  # its partitions were revoked meanwhile: it is left to their next owner

    def attempt(self, write: Callable[[], None], size: int, idle: Idle, stop: threading.Event | None,
                failed: Exception | None = None) -> bool:
        """`write` until it succeeds (True) or the batch is left to the partitions' next owner (True) or a stop
        leaves it unwritten (False); `failed`: how its first try (elsewhere) failed."""
        paused = False
        backoff = self.backoff_s
        self.retrying, self.revoked = True, False
        try:
            while True:
                try:
                    if failed is not None:
                        exc, failed = failed, None
                        raise exc
                    if self.revoked:  # its partitions went to a rebalance: their next owner reads it again
                        self.stats.state = "running"
                        return True
                    write()
                    return True
                except Exception as exc:
                    self.stats.write_errors += 1
                    if not is_transient(exc):
                        self.stats.state = "failed"
                        self.stats.last_error = f"stopped: {one_line(exc)}"
                        log.error("batch write failed (%d events), stopping: %s", size, exc)
                        raise ConsumerFailed(f"ingest stopped: {one_line(exc)}") from exc
                    self.stats.state = "retrying"
                    self.stats.last_error = f"retrying in {backoff:.1f} s: {one_line(exc)}"
                    log.warning("batch write failed (%d events), retrying in %.1f s: %s", size, backoff, one_line(exc))
                    if not paused:
                        paused = idle.pause()
                    if stop is not None and stop.is_set():
                        return False
                    idle.keep_alive(backoff)
                    backoff = min(self.max_backoff_s, backoff * 2)
        finally:
            self.retrying = False
            if paused:  # (harmless for partitions a rebalance took away)
                idle.resume()
