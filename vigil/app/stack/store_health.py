"""ClickHouse health for `vigil status`, checked off the request path.

The embedded engine runs one query at a time: while the analyzer's ingest writes a large
batch and its detectors judge a backlog, a `SELECT version()` waits behind them, and a
status request that asked it would wait too (the control port "did not answer"). So a
background thread checks the store every `every_s` and `/health` reports the last result
and how old it is, at once. A check that has not come back for `stuck_s` reports the
store as down.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vigil.errors import one_line
from vigil.redact import scrub, shown_dsn


@dataclass(kw_only=True)
class StoreHealth:
    check: Callable[[], str]  # returns the version; raises when the store is unreachable
    dsn: str
    every_s: float = 5.0
    stuck_s: float = 60.0
    _result: dict[str, Any] = field(default_factory=dict)
    _started: float = 0.0  # monotonic start of the check in flight (0 = none)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._once()  # the first answer before `vigil up` reports the stack up
        self._thread = threading.Thread(target=self._run, name="vigil-store-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._once()

    def _once(self) -> None:
        self._started = time.monotonic()
        try:
            self._result = {"ok": True, "version": self.check(), "checked": time.time()}
        except Exception as exc:
            self._result = {"ok": False, "error": scrub(one_line(exc, 300), self.dsn), "checked": time.time()}
        finally:
            self._started = 0.0

    def report(self) -> dict[str, Any]:
        """The latest result (never waits on the store)."""
        out: dict[str, Any] = {"dsn": shown_dsn(self.dsn), **self._result}
        if "checked" in out:
            out["checked_s_ago"] = round(time.time() - out.pop("checked"), 1)
        busy = time.monotonic() - self._started if self._started else 0.0
        if busy >= self.stuck_s:
            out.update(ok=False, error=f"ClickHouse has not answered for {busy:.0f} s")
        out.setdefault("ok", False)
        return out
