"""DCGM's health watches as an optional source of hardware facts, where DCGM is installed.

`DcgmHealth` is the Protocol (`check()`: the incidents DCGM's health check reports now); `PydcgmHealth` the real
one over DCGM's Python bindings (`pydcgm`, `dcgm_structs`: a group of every GPU, `DCGM_HEALTH_WATCH_ALL`, then
`health.Check()` per poll); `load_dcgm()` returns None, logged once, where the bindings or the host engine are
absent: the agent then runs without it, nothing else changes. `DcgmWatch` polls on a thread of its own (never the
heartbeat thread) every `interval_s` and ships each incident once while it lasts (again after it cleared): a
`LogLine` with source `nvml` (DCGM reads the GPUs through the driver's management library; the message says
`DCGM health`), the GPU, and a category and catalog action by the watched system: memory -> `ecc` (reset the GPU),
NVLink / NVSwitch -> `nvlink` (cordon), PCIe -> `pcie_aer` (cordon), anything else (thermal, power, PMU, MCU,
SM, InfoROM, driver) -> `gpu_health` (investigate); a warning watches (`watch`). A failed memory or NVLink
incident is noted in the agent's error memory as kernel and NVML faults are. A failing check is counted and
logged, never raised.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from vigil.collector.summary import ErrorMemory
from vigil.contract import Event, LogLine, utcnow
from vigil.contract.xid import XidAction

log = logging.getLogger(__name__)
PCIE, NVLINK, PMU, MCU, MEM, SM, INFOROM, THERMAL, POWER, DRIVER = (0x1, 0x2, 0x4, 0x8, 0x10, 0x20, 0x40, 0x80,
                                                                   0x100, 0x200)
NVSWITCH_NONFATAL, NVSWITCH_FATAL = 0x400, 0x800  # dcgm_structs.DCGM_HEALTH_WATCH_*
WARN, FAIL = 10, 20  # dcgm_structs.DCGM_HEALTH_RESULT_*
NAMES = {PCIE: "pcie", NVLINK: "nvlink", PMU: "pmu", MCU: "mcu", MEM: "memory", SM: "sm", INFOROM: "inforom",
         THERMAL: "thermal", POWER: "power", DRIVER: "driver", NVSWITCH_NONFATAL: "nvswitch",
         NVSWITCH_FATAL: "nvswitch"}
CATEGORY = {MEM: ("ecc", XidAction.RESET_GPU), NVLINK: ("nvlink", XidAction.CORDON),
            NVSWITCH_FATAL: ("nvlink", XidAction.CORDON), NVSWITCH_NONFATAL: ("nvlink", XidAction.CORDON),
            PCIE: ("pcie_aer", XidAction.CORDON)}
NOTED = {"ecc", "nvlink"}  # hardware faults a failed generation reports (`Member.fault`)


@dataclass(frozen=True, kw_only=True)
class Incident:
    system: int  # a DCGM_HEALTH_WATCH_* bit
    result: Literal["warn", "fail"]
    gpu: int | None
    code: int
    message: str


class DcgmHealth(Protocol):
    def check(self) -> list[Incident]:
        """The incidents DCGM's health watches report now (raises when DCGM cannot answer)."""
        ...


@dataclass(kw_only=True)
class PydcgmHealth:
    """DCGM through its Python bindings (the host engine, `nv-hostengine`, at `address`)."""

    address: str = "127.0.0.1"
    _group: Any = field(default=None, init=False, repr=False)
    _structs: Any = field(default=None, init=False, repr=False)

    def connect(self) -> None:
        import dcgm_structs  # type: ignore[import-not-found]
        import pydcgm  # type: ignore[import-not-found]

        handle = pydcgm.DcgmHandle(ipAddress=self.address)
        group = pydcgm.DcgmGroup(handle, groupName="vigil-health", groupType=dcgm_structs.DCGM_GROUP_DEFAULT)
        group.health.Set(dcgm_structs.DCGM_HEALTH_WATCH_ALL)
        self._group, self._structs = group, dcgm_structs

    def check(self) -> list[Incident]:
        resp = self._group.health.Check()
        out: list[Incident] = []
        for inc in list(resp.incidents)[: int(resp.incidentCount)]:
            if inc.health not in (WARN, FAIL):
                continue
            gpu = int(inc.entityInfo.entityId) if inc.entityInfo.entityGroupId == self._structs.DCGM_FE_GPU else None
            msg = inc.error.msg
            out.append(Incident(system=int(inc.system), result="fail" if inc.health == FAIL else "warn", gpu=gpu,
                                code=int(inc.error.code),
                                message=(msg.decode("utf-8", "replace") if isinstance(msg, bytes) else str(msg))))
        return out


def load_dcgm(address: str = "127.0.0.1") -> DcgmHealth | None:
    """DCGM's health watches, or None where its bindings or host engine are absent (logged once)."""
    real = PydcgmHealth(address=address)
    try:
        real.connect()
    except Exception as exc:  # ImportError where DCGM is not installed; DCGMError where no host engine answers
        log.info("DCGM health watches not read (%s: %s)", type(exc).__name__, exc)
        return None
    return real


@dataclass(kw_only=True)
class DcgmWatch:
    health: DcgmHealth
    job_id: str
    host: str
    emit: Callable[[Sequence[Event]], None]
    interval_s: float = 30.0
    memory: ErrorMemory | None = None
    failures: int = 0  # checks that raised
    facts: int = 0
    _active: set[tuple[int, int | None, int, str]] = field(default_factory=set, init=False, repr=False)

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            self.poll()
            stop.wait(self.interval_s)

    def poll(self) -> None:
        try:
            incidents = self.health.check()
        except Exception as exc:
            self.failures += 1
            if self.failures == 1 or self.failures % 100 == 0:
                log.warning("DCGM health check failed (%d times): %s", self.failures, exc)
            return
        now = {(i.system, i.gpu, i.code, i.result): i for i in incidents[:256]}
        new = [i for key, i in now.items() if key not in self._active]
        self._active = set(now)
        self.emit([self._fact(i) for i in new])

    def _fact(self, i: Incident) -> LogLine:
        category, action = CATEGORY.get(i.system, ("gpu_health", XidAction.INVESTIGATE))
        if i.result == "warn":
            action = XidAction.WATCH
        name = NAMES.get(i.system, f"system {i.system:#x}")
        message = f"DCGM health {i.result} ({name}, error {i.code}): {i.message}"[:8192]
        at = utcnow()
        if self.memory is not None and i.result == "fail" and category in NOTED:
            self.memory.note_fault(category, message[:2048], at, gpu=i.gpu, action=action.value)
        self.facts += 1
        return LogLine(job_id=self.job_id, host=self.host, ts=at, category=category, source="nvml",
                       severity="critical" if i.result == "fail" else "warning", action=action, gpu_index=i.gpu,
                       message=message)
