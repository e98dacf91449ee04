"""NVML as a source of hardware facts (source=nvml): an event set for Xid and ECC events, and the counters.

Beside the polled `GpuState` of heartbeats: `NvmlEvents` registers every GPU for critical Xid, single- and
double-bit ECC events in one event set and waits on it on a thread of its own (`nvmlEventSetWait`, a timeout
of `wait_ms`: never on the heartbeat thread). An Xid event gets the catalog's severity and action; a
double-bit ECC event is `ecc`, critical, reset the GPU; a single-bit one a warning to watch. Every
`poll_s` it reads each GPU's remapped rows (pending: reset the GPU; failed: cordon) and retired pages (growth:
reset the GPU; growth in `rising.condemn_after` polls within a day: critical, cordon, the GPU condemned),
and notices a GPU that is gone (fewer GPUs than at the start, or NVML saying GPU_IS_LOST):
`gpu_lost`, critical, reboot then check. Host faults are noted in the agent's error memory, as kernel facts
are. The module is passed in (`pynvml`, or a test double with the same functions).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from vigil.collector.rising import Rising
from vigil.collector.summary import ErrorMemory
from vigil.contract import Event, LogLine, utcnow
from vigil.contract.telemetry import Severity
from vigil.contract.xid import HOST_ACTIONS, XidAction, xid_entry

log = logging.getLogger(__name__)
TIMEOUT, GPU_IS_LOST = 10, 15  # NVML_ERROR_TIMEOUT, NVML_ERROR_GPU_IS_LOST
SBE, DBE, XID = 0x1, 0x2, 0x8  # nvmlEventType{SingleBitEccError,DoubleBitEccError,XidCriticalError}


def _code(exc: Exception) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


@dataclass(kw_only=True)
class NvmlEvents:
    nvml: Any
    job_id: str
    host: str
    emit: Callable[[Sequence[Event]], None]
    memory: ErrorMemory | None = None
    wait_ms: int = 1000
    poll_s: float = 10.0
    _set: Any = field(default=None, init=False)
    _index: dict[Any, int] = field(default_factory=dict, init=False)  # handle -> GPU index
    _uuid: dict[int, str] = field(default_factory=dict, init=False)
    _counters: dict[int, tuple[int, int, int, int]] = field(default_factory=dict, init=False)
    _lost: set[int] = field(default_factory=set, init=False)
    rising: Rising = field(default_factory=Rising)  # retired pages / remapped rows that keep growing condemn the GPU

    def open(self) -> None:
        nv = self.nvml
        self._set = nv.nvmlEventSetCreate()
        for i in range(int(nv.nvmlDeviceGetCount())):
            h = nv.nvmlDeviceGetHandleByIndex(i)
            self._index[h] = i
            uuid = nv.nvmlDeviceGetUUID(h)
            self._uuid[i] = uuid.decode() if isinstance(uuid, bytes) else str(uuid)
            try:
                wanted = (SBE | DBE | XID) & int(nv.nvmlDeviceGetSupportedEventTypes(h))
                nv.nvmlDeviceRegisterEvents(h, wanted, self._set)
            except Exception as exc:  # not supported on this GPU: its counters are still read
                log.info("GPU %d: no NVML events (%s)", i, exc)
        self.poll()

    def run(self, stop: threading.Event) -> None:
        try:
            self.open()
        except Exception as exc:
            log.warning("NVML events not available (%s): none are waited for", exc)
            return
        next_poll = time.monotonic() + self.poll_s
        while not stop.is_set():
            try:
                self.emit(self.wait_once())
                if time.monotonic() >= next_poll:
                    next_poll = time.monotonic() + self.poll_s
                    self.emit(self.poll())
            except Exception:  # one failed wait or read never ends the source
                log.exception("NVML events")
                stop.wait(self.wait_ms / 1000)
        try:
            self.nvml.nvmlEventSetFree(self._set)
        except Exception:
            pass

    def wait_once(self) -> list[LogLine]:
        try:
            data = self.nvml.nvmlEventSetWait(self._set, self.wait_ms)
        except Exception as exc:
            if _code(exc) == TIMEOUT:
                return []
            if _code(exc) == GPU_IS_LOST:
                return self.poll()
            raise
        index = self._index.get(data.device)
        kind, value = int(data.eventType), int(data.eventData)
        if kind == XID:
            e = xid_entry(value)
            return [self._fact(index, "xid", e.severity, e.action, f"NVML: Xid {value} ({e.name})", xid=value)]
        if kind == DBE:
            return [self._fact(index, "ecc", "critical", XidAction.RESET_GPU, "NVML: double-bit ECC error")]
        if kind == SBE:
            return [self._fact(index, "ecc", "warning", XidAction.WATCH, "NVML: single-bit ECC error")]
        return []

    def poll(self) -> list[LogLine]:
        """Remapped rows, retired pages and GPUs gone since the last poll."""
        nv, out = self.nvml, []
        for h, i in self._index.items():
            if i in self._lost:
                continue
            try:
                _, unc, pending, failed = nv.nvmlDeviceGetRemappedRows(h)
                retired = sum(len(nv.nvmlDeviceGetRetiredPages(h, cause)) for cause in (0, 1))
            except Exception as exc:
                if _code(exc) == GPU_IS_LOST:
                    self._lost.add(i)
                    out.append(self._fact(i, "gpu_lost", "critical", XidAction.REBOOT_THEN_CHECK,
                                          "NVML: the GPU is lost"))
                continue
            now = (unc, int(pending), int(failed), retired)
            before = self._counters.get(i)
            self._counters[i] = now
            if before is None:
                continue
            if now[2] and not before[2]:
                out.append(self._fact(i, "ecc", "critical", XidAction.CORDON, "NVML: row remapping failed"))
            elif now[1] and not before[1]:
                out.append(self._fact(i, "ecc", "warning", XidAction.RESET_GPU,
                                      f"NVML: row remapping pending ({unc} uncorrectable rows): reset the GPU"))
            if now[3] > before[3]:
                out.append(self._fact(i, "ecc", "warning", XidAction.RESET_GPU,
                                      f"NVML: {now[3] - before[3]} more retired pages ({now[3]} in all)"))
            if (now[3] > before[3] or now[0] > before[0]) and self.rising.grew(i, time.monotonic()):
                out.append(self._fact(i, "ecc", "critical", XidAction.CORDON,
                                      f"NVML: retired pages / remapped rows keep growing ({now[3]} pages, {now[0]} "
                                      f"uncorrectable rows; {self.rising.condemn_after} growths within a day): "
                                      "condemned"))
        try:
            count = int(nv.nvmlDeviceGetCount())
        except Exception:
            count = len(self._index)
        for i in range(count, len(self._index)):
            if i not in self._lost:
                self._lost.add(i)
                out.append(self._fact(i, "gpu_lost", "critical", XidAction.REBOOT_THEN_CHECK,
                                      "NVML: the GPU is gone from the device list"))
        return out

    def _fact(self, index: int | None, category: str, severity: Severity, action: XidAction, message: str,
              xid: int | None = None) -> LogLine:
        if self.memory is not None and action in HOST_ACTIONS and category in ("xid", "ecc", "gpu_lost"):
            self.memory.note_fault(category, message, utcnow(), gpu=index, action=action.value)
        return LogLine(job_id=self.job_id, host=self.host, category=category, severity=severity, source="nvml",
                       action=action, xid=xid, gpu_index=index, message=message,
                       gpu_uuid=self._uuid.get(index, "") if index is not None else "")
