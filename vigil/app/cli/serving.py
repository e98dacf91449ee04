"""`serve(service)`: the one run loop of every long-running CLI command (analyzer, controller, notifier,
dashboard, `vigil collector`).

It stops on SIGINT or SIGTERM (or after `duration` seconds), starts the service, prints its banner, prints a
status line every `every_s` seconds when given one, and always stops the service on the way out. A service that
reports a failure (`failed()` not empty) ends the loop and the process exits 1 with that reason on stderr, so a
supervisor restarts it; otherwise 0.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from collections.abc import Callable
from typing import Protocol


class Servable(Protocol):
    def start(self) -> None: ...

    def stop(self) -> None: ...


def serve(service: Servable, *, name: str, banner: Callable[[], str], report: Callable[[], str] | None = None,
          every_s: float = 10.0, duration: float | None = None, failed: Callable[[], str] | None = None) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    service.start()
    print(banner(), flush=True)
    started = next_report = time.monotonic()
    try:
        while not stop.wait(1.0):
            now = time.monotonic()
            if failed is not None and failed():
                break
            if duration is not None and now - started >= duration:
                break
            if report is not None and now - next_report >= every_s:
                next_report = now
                print(report(), flush=True)
    finally:
        service.stop()
    why = failed() if failed is not None else ""
    if why:
        print(f"{name}: {why}", file=sys.stderr, flush=True)
        return 1
    return 0
