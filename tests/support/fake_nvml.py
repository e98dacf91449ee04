"""A test double of the `pynvml` functions the agent calls: GPUs, an event set the test fills, counters, loss.

A GPU's `unsupported` names the functions that raise NOT_SUPPORTED on it (remapped rows before Ampere, retired
pages on A100/H100); `nvlinks` maps its active or inactive links to their error counters (by pynvml's counter
constants: 0 replay, 1 recovery, 2 CRC flit, 3 CRC data); links it does not list raise NOT_SUPPORTED."""

from __future__ import annotations

import queue
from dataclasses import dataclass, field
from typing import Any


class NVMLError(Exception):
    def __init__(self, value: int) -> None:
        super().__init__(value)
        self.value = value


@dataclass
class EventData:
    device: Any
    eventType: int
    eventData: int


@dataclass
class FakeGpu:
    uuid: str
    bus_id: str
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)  # corrected, uncorrected, pending, failed
    retired: tuple[int, int] = (0, 0)  # pages retired for multiple SBEs, for a DBE
    lost: bool = False
    retire_pending: bool = False
    unsupported: frozenset[str] = frozenset()
    nvlinks: dict[int, dict[int, int]] = field(default_factory=dict)  # link -> {counter: value}
    inactive: set[int] = field(default_factory=set)  # links listed in nvlinks but not active


@dataclass
class FakeNvml:
    gpus: list[FakeGpu] = field(default_factory=list)
    events: queue.Queue[EventData] = field(default_factory=queue.Queue)
    registered: dict[int, int] = field(default_factory=dict)  # GPU index -> event mask
    NVML_NVLINK_MAX_LINKS = 18
    NVML_NVLINK_ERROR_DL_REPLAY, NVML_NVLINK_ERROR_DL_RECOVERY = 0, 1
    NVML_NVLINK_ERROR_DL_CRC_FLIT, NVML_NVLINK_ERROR_DL_CRC_DATA = 2, 3
    NVML_FEATURE_DISABLED, NVML_FEATURE_ENABLED = 0, 1
    calls: dict[str, int] = field(default_factory=dict)  # function name -> times called

    def handle(self, index: int) -> Any:
        return ("gpu", index)

    def raise_xid(self, index: int, code: int) -> None:
        self.events.put(EventData(self.handle(index), 0x8, code))

    def raise_ecc(self, index: int, *, double: bool) -> None:
        self.events.put(EventData(self.handle(index), 0x2 if double else 0x1, 0))

    # ---- pynvml's functions ------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        return sum(1 for g in self.gpus if not g.lost)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        return self.handle(i)

    def _gpu(self, h: Any, fn: str = "") -> FakeGpu:
        gpu: FakeGpu = self.gpus[h[1]]
        if fn:
            self.calls[fn] = self.calls.get(fn, 0) + 1
        if gpu.lost:
            raise NVMLError(15)  # NVML_ERROR_GPU_IS_LOST
        if fn in gpu.unsupported:
            raise NVMLError(3)  # NVML_ERROR_NOT_SUPPORTED
        return gpu

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return self._gpu(h).uuid

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        return type("PciInfo", (), {"busId": self._gpu(h).bus_id.encode()})()

    def nvmlEventSetCreate(self) -> str:
        return "event-set"

    def nvmlDeviceGetSupportedEventTypes(self, h: Any) -> int:
        return 0xB | 0x10

    def nvmlDeviceRegisterEvents(self, h: Any, mask: int, es: Any) -> None:
        self.registered[h[1]] = mask

    def nvmlEventSetWait(self, es: Any, timeout_ms: int) -> EventData:
        try:
            return self.events.get(timeout=timeout_ms / 1000)
        except queue.Empty:
            raise NVMLError(10) from None  # NVML_ERROR_TIMEOUT

    def nvmlEventSetFree(self, es: Any) -> None:
        pass

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        return self._gpu(h, "nvmlDeviceGetRemappedRows").remapped

    def nvmlDeviceGetRetiredPages(self, h: Any, cause: int) -> list[int]:
        return list(range(self._gpu(h, "nvmlDeviceGetRetiredPages").retired[cause]))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, h: Any) -> int:
        return int(self._gpu(h, "nvmlDeviceGetRetiredPagesPendingStatus").retire_pending)

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        gpu = self._gpu(h, "nvmlDeviceGetNvLinkState")
        if link not in gpu.nvlinks:
            raise NVMLError(3)
        return 0 if link in gpu.inactive else 1

    def nvmlDeviceGetNvLinkErrorCounter(self, h: Any, link: int, counter: int) -> int:
        gpu = self._gpu(h, "nvmlDeviceGetNvLinkErrorCounter")
        if link not in gpu.nvlinks or counter not in (0, 1, 2, 3):
            raise NVMLError(3)
        return gpu.nvlinks[link].get(counter, 0)
