"""GPU readings through NVML (`nvidia-ml-py`), when the library and a driver are present.

`NvmlProbe.read()` returns one `GpuState` per GPU, or an empty list when NVML is absent
(no import, no driver, no GPU): heartbeats then carry nothing GPU-related. Every field
is read on its own; one that the GPU does not support stays None.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vigil.contract import GpuState

log = logging.getLogger(__name__)

THROTTLE_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_REASONS.items() if mask & bit]


def _try(fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and friends: the field stays empty
        return None


@dataclass(kw_only=True)
class NvmlProbe:
    available: bool = False
    _nvml: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml, self.available = pynvml, True
        except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, driver not loaded
            log.debug("NVML not available (%s): heartbeats carry no GPU data", exc)

    def read(self) -> list[GpuState]:
        if not self.available:
            return []
        nv = self._nvml
        count = _try(nv.nvmlDeviceGetCount) or 0
        out: list[GpuState] = []
        for i in range(int(count)):
            h = _try(nv.nvmlDeviceGetHandleByIndex, i)
            if h is None:
                continue
            out.append(self._one(nv, i, h))
        return out

    @staticmethod
    def _one(nv: Any, index: int, h: Any) -> GpuState:
        util = _try(nv.nvmlDeviceGetUtilizationRates, h)
        mem = _try(nv.nvmlDeviceGetMemoryInfo, h)
        power = _try(nv.nvmlDeviceGetPowerUsage, h)
        reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or \
            nv.nvmlDeviceGetCurrentClocksThrottleReasons
        mask = _try(reasons_fn, h)
        ecc = _try(nv.nvmlDeviceGetTotalEccErrors, h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC)
        retired = [_try(nv.nvmlDeviceGetRetiredPages, h, cause) for cause in
                   (nv.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                    nv.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)]
        name = _try(nv.nvmlDeviceGetName, h)
        uuid = _try(nv.nvmlDeviceGetUUID, h)
        temp = _try(nv.nvmlDeviceGetTemperature, h, nv.NVML_TEMPERATURE_GPU)
        clock = _try(nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
        return GpuState(
            index=index,
            name=(name.decode() if isinstance(name, bytes) else str(name or "")),
            uuid=(uuid.decode() if isinstance(uuid, bytes) else str(uuid or "")),
            util_pct=float(util.gpu) if util is not None else None,
            mem_used_mib=mem.used / 2**20 if mem is not None else None,
            mem_total_mib=mem.total / 2**20 if mem is not None else None,
            temp_c=float(temp) if temp is not None else None,
            power_w=power / 1000.0 if power is not None else None,
            sm_clock_mhz=float(clock) if clock is not None else None,
            throttle_reasons=throttle_names(int(mask)) if mask is not None else [],
            ecc_uncorrected=int(ecc) if ecc is not None else None,
            retired_pages=sum(len(r) for r in retired if r is not None) if any(r is not None for r in retired) else None,
        )

    @property
    def module(self) -> Any:
        """The NVML module (pynvml) when available, for the event waiter (`collector.nvmlevents`)."""
        return self._nvml if self.available else None

    def bus_ids(self) -> dict[str, tuple[int, str]]:
        """Each GPU's PCI bus id (NVML's spelling, `00000000:3B:00.0`) -> (index, UUID); empty without NVML."""
        if not self.available:
            return {}
        nv = self._nvml
        out: dict[str, tuple[int, str]] = {}
        for i in range(int(_try(nv.nvmlDeviceGetCount) or 0)):
            h = _try(nv.nvmlDeviceGetHandleByIndex, i)
            pci = _try(nv.nvmlDeviceGetPciInfo, h) if h is not None else None
            if pci is None:
                continue
            bus, uuid = pci.busId, _try(nv.nvmlDeviceGetUUID, h)
            out[bus.decode() if isinstance(bus, bytes) else str(bus)] = (
                i, uuid.decode() if isinstance(uuid, bytes) else str(uuid or ""))
        return out

    def close(self) -> None:
        if self.available:
            _try(self._nvml.nvmlShutdown)
            self.available = False
