"""Waiting in tests: for a condition, never for a fixed time."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], timeout: float = 60.0, what: str = "the condition",
               every: float = 0.2) -> None:
    """Poll `predicate` until it is true; AssertionError naming `what` once `timeout` seconds passed.

    The timeout only bounds a test that is failing: nothing is timed, and a fast machine
    returns as soon as the condition holds.
    """
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
        time.sleep(every)
