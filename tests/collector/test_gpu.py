"""NVML readings: nothing when NVML is absent (this machine), every field mapped when present.

No GPU here, so the "present" case runs against a small in-memory stand-in of the
pynvml module with the real function names and constants; on a GPU node the same
probe runs against the driver.
"""

from __future__ import annotations

import sys
import types
from types import SimpleNamespace
from typing import Any

import pytest

from vigil.collector.gpu import NvmlProbe, throttle_names

pytestmark = pytest.mark.pure


def test_absent_nvml_gives_no_gpu_data() -> None:
    probe = NvmlProbe()
    if probe.available:
        pytest.skip("this machine has NVML")
    assert probe.read() == []


def fake_pynvml() -> types.ModuleType:
    m = types.ModuleType("pynvml")

    class NVMLError(Exception):
        pass

    def not_supported(*_: Any) -> Any:
        raise NVMLError("Not Supported")

    consts = dict(NVML_MEMORY_ERROR_TYPE_UNCORRECTED=1, NVML_VOLATILE_ECC=0, NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1,
                  NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0,
                  NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR=1)
    funcs = dict(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetName=lambda h: b"NVIDIA H100 80GB HBM3",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetUtilizationRates=lambda h: SimpleNamespace(gpu=97, memory=40),
        nvmlDeviceGetMemoryInfo=lambda h: SimpleNamespace(used=40 * 2**30, total=80 * 2**30),
        nvmlDeviceGetTemperature=lambda h, s: 61, nvmlDeviceGetPowerUsage=lambda h: 650_000,
        nvmlDeviceGetClockInfo=lambda h, c: 1980,
        nvmlDeviceGetCurrentClocksThrottleReasons=lambda h: 0x4 | 0x40,
        nvmlDeviceGetTotalEccErrors=lambda h, t, c: 0 if h == 0 else 3,
        nvmlDeviceGetRetiredPages=lambda h, cause: [] if h == 0 else [0x1000, 0x2000],
    )
    for k, v in {**consts, **funcs}.items():
        setattr(m, k, v)
    m.NVMLError = NVMLError  # type: ignore[attr-defined]
    m.nvmlDeviceGetPowerUsage = lambda h: 650_000 if h == 0 else not_supported()  # type: ignore[attr-defined]
    return m


def test_present_nvml_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    probe = NvmlProbe()
    assert probe.available
    g0, g1 = probe.read()
    assert (g0.index, g0.name, g0.uuid, g0.util_pct, g0.mem_used_mib, g0.mem_total_mib) == \
        (0, "NVIDIA H100 80GB HBM3", "GPU-0", 97.0, 40 * 1024.0, 80 * 1024.0)
    assert (g0.temp_c, g0.power_w, g0.sm_clock_mhz) == (61.0, 650.0, 1980.0)
    assert g0.throttle_reasons == ["sw_power_cap", "hw_thermal_slowdown"]
    assert (g0.ecc_uncorrected, g0.retired_pages) == (0, 0)
    assert (g1.power_w, g1.ecc_uncorrected, g1.retired_pages) == (None, 3, 4)  # unsupported -> None
    probe.close()


def test_throttle_names() -> None:
    assert throttle_names(0) == [] and throttle_names(0x1 | 0x8) == ["gpu_idle", "hw_slowdown"]
