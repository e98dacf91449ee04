"""DCGM's health watches as an optional source (issue 49), with a test double of the `DcgmHealth` Protocol.

Each incident ships once while it lasts (again after it cleared), with its GPU, a category and action by the
watched system (memory: ecc, reset the GPU; NVLink: cordon; a warning: watch; others: gpu_health, investigate); a
failed memory incident is the host's fault in the agent's error memory; a check that raises is counted, never
raised; where DCGM is absent (here: no bindings) `load_dcgm` is None and the agent runs without it.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest

from vigil.collector.dcgm import FAIL, MEM, NVLINK, THERMAL, DcgmWatch, Incident, load_dcgm
from vigil.collector.summary import ErrorMemory
from vigil.contract import Event, LogLine
from vigil.contract.xid import XidAction

pytestmark = pytest.mark.pure


class FakeDcgm:
    """A test double of DCGM's health check: answers the incidents it is given, or raises."""

    def __init__(self) -> None:
        self.incidents: list[Incident] = []
        self.error: Exception | None = None

    def check(self) -> list[Incident]:
        if self.error is not None:
            raise self.error
        return list(self.incidents)


def test_dcgm_incidents_become_facts_once_while_they_last() -> None:
    dcgm, memory = FakeDcgm(), ErrorMemory()
    shipped: list[Event] = []

    def emit(events: Sequence[Event]) -> None:
        shipped.extend(events)

    watch = DcgmWatch(health=dcgm, job_id="j", host="h", emit=emit, memory=memory)
    dbe = Incident(system=MEM, result="fail", gpu=2, code=FAIL, message="GPU 2 had uncorrectable memory errors")
    link = Incident(system=NVLINK, result="warn", gpu=0, code=14, message="NVLink CRC errors rising")
    hot = Incident(system=THERMAL, result="fail", gpu=1, code=41, message="clocks throttled")
    dcgm.incidents = [dbe, link, hot]
    watch.poll()
    watch.poll()  # still there: nothing new
    facts = [e for e in shipped if isinstance(e, LogLine)]
    assert [(f.category, f.gpu_index, f.severity, f.action, f.source) for f in facts] == [
        ("ecc", 2, "critical", XidAction.RESET_GPU, "nvml"), ("nvlink", 0, "warning", XidAction.WATCH, "nvml"),
        ("gpu_health", 1, "critical", XidAction.INVESTIGATE, "nvml")]
    assert facts[0].message.startswith("DCGM health fail (memory, error 20)")
    fault = memory.fault_since(None)
    assert fault is not None and (fault[0], fault[1].gpus, fault[1].action) == ("ecc", (2,), "reset_gpu")

    dcgm.incidents = [link]
    watch.poll()  # the memory incident cleared
    dcgm.incidents = [link, dbe]
    watch.poll()  # and came back: shipped again
    assert len([e for e in shipped if isinstance(e, LogLine)]) == 4

    dcgm.error = RuntimeError("DCGM_ST_CONNECTION_NOT_VALID")
    watch.poll()
    assert watch.failures == 1 and len(shipped) == 4


def test_the_watch_runs_on_its_own_thread_until_stopped() -> None:
    dcgm, stop, seen = FakeDcgm(), threading.Event(), threading.Event()
    dcgm.incidents = [Incident(system=MEM, result="fail", gpu=0, code=FAIL, message="DBE")]
    watch = DcgmWatch(health=dcgm, job_id="j", host="h", emit=lambda ev: seen.set() if ev else None, interval_s=0.05)
    thread = threading.Thread(target=watch.run, args=(stop,), daemon=True)
    thread.start()
    assert seen.wait(30)
    stop.set()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_without_dcgm_there_is_no_watch() -> None:
    assert load_dcgm() is None  # no DCGM Python bindings on this machine: skipped, not an error
