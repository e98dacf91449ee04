"""`serve(service)`, every long-running command's loop: stops the service on a signal, a failure or its duration."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator

import pytest

from vigil.app.cli.serving import serve

pytestmark = pytest.mark.pure


class Recording:
    def __init__(self) -> None:
        self.calls: list[str] = []
        self.started = threading.Event()
        self.why = ""

    def start(self) -> None:
        self.calls.append("start")
        self.started.set()

    def stop(self) -> None:
        self.calls.append("stop")


@pytest.fixture(autouse=True)
def _handlers() -> Iterator[None]:
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def test_a_signal_stops_the_service_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    svc = Recording()
    threading.Thread(target=lambda: svc.started.wait(10) and os.kill(os.getpid(), signal.SIGTERM), daemon=True).start()
    assert serve(svc, name="x", banner=lambda: "x running") == 0
    assert svc.calls == ["start", "stop"] and "x running" in capsys.readouterr().out


def test_a_failed_service_ends_the_loop_and_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    svc = Recording()
    threading.Thread(target=lambda: svc.started.wait(10) and setattr(svc, "why", "ingest stopped"), daemon=True).start()
    assert serve(svc, name="x", banner=lambda: "", failed=lambda: svc.why) == 1
    assert svc.calls == ["start", "stop"] and "x: ingest stopped" in capsys.readouterr().err


def test_a_duration_ends_it_and_a_report_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    svc = Recording()
    assert serve(svc, name="x", banner=lambda: "", duration=2.5, every_s=1.0, report=lambda: "status-line") == 0
    assert svc.calls == ["start", "stop"] and "status-line" in capsys.readouterr().out
