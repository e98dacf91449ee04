"""The detector loop's next turn: a period after the last, or early once the ingest has stored a batch."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

from vigil.analyzer.service import AnalyzerService
from vigil.analyzer.settings import AnalyzerSettings


def _service(**settings: Any) -> Any:
    svc = AnalyzerService.__new__(AnalyzerService)  # only what the loop's wait reads: no stack
    svc.settings = AnalyzerSettings(**settings)
    svc.ingest = SimpleNamespace(consumer=SimpleNamespace(stats=SimpleNamespace(batches=0)))
    svc._stop = threading.Event()
    svc._turn_failed = False
    return svc


def _next(svc: Any, wait: float) -> tuple[threading.Thread, list[bool]]:
    out: list[bool] = []
    t = threading.Thread(target=lambda: out.append(svc._next_turn(wait, time.monotonic())), daemon=True)
    t.start()
    return t, out


def test_a_stored_batch_starts_the_next_turn_before_the_period() -> None:
    svc = _service(detect_after_store_s=0.2)
    t, out = _next(svc, 600.0)
    svc.ingest.consumer.stats.batches += 1
    t.join(60)
    assert out == [False]  # a turn, long before the 600 s period


def test_without_a_batch_the_turn_waits_for_the_period_or_the_stop() -> None:
    svc = _service(detect_after_store_s=0.2)
    assert svc._next_turn(0.3, time.monotonic()) is False  # the period passed: a turn
    t, out = _next(svc, 600.0)
    svc._stop.set()
    t.join(60)
    assert out == [True]


def test_early_turns_off_or_after_a_failed_turn_wait_the_whole_period() -> None:
    for svc in (_service(detect_after_store_s=0), _service()):
        if svc.settings.detect_after_store_s:
            svc._turn_failed = True
        t, out = _next(svc, 600.0)
        svc.ingest.consumer.stats.batches += 1
        t.join(1.0)
        assert t.is_alive() and not out  # the batch did not start a turn
        svc._stop.set()
        t.join(60)
        assert out == [True]
