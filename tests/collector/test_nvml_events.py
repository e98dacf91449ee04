"""NVML as a source (pynvml test double): Xid and ECC events, remapped rows, retired pages, a GPU that vanishes."""

from __future__ import annotations

import threading

import pytest

from tests.support.fake_nvml import FakeGpu, FakeNvml
from tests.support.waiting import wait_until
from vigil.collector.gpumap import GpuMap
from vigil.collector.nvmlevents import NvmlEvents
from vigil.collector.summary import ErrorMemory
from vigil.contract import LogLine
from vigil.contract.xid import XidAction

pytestmark = pytest.mark.pure


def node() -> FakeNvml:
    return FakeNvml(gpus=[FakeGpu(uuid=f"GPU-{i}", bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(4)])


def facts(events: list[LogLine]) -> list[tuple[str, int | None, str, XidAction | None, int | None]]:
    return [(e.category, e.gpu_index, e.severity, e.action, e.xid) for e in events]


def test_xid_and_ecc_events_through_the_waiting_thread() -> None:
    nv, got, memory = node(), [], ErrorMemory()
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=got.extend, memory=memory, wait_ms=50)
    stop = threading.Event()
    thread = threading.Thread(target=src.run, args=(stop,))
    thread.start()
    try:
        wait_until(lambda: len(nv.registered) == 4, 10, "every GPU registered")
        assert all(mask == 0xB for mask in nv.registered.values())  # Xid, SBE, DBE: what it asked and is supported
        nv.raise_xid(2, 31)
        nv.raise_ecc(1, double=True)
        nv.raise_xid(3, 79)
        wait_until(lambda: len(got) >= 3, 10, "three facts")
    finally:
        stop.set()
        thread.join(10)
    assert facts(got) == [("xid", 2, "error", XidAction.RESTART_JOB, 31), ("ecc", 1, "critical", XidAction.RESET_GPU, None),
                          ("xid", 3, "critical", XidAction.REBOOT_THEN_CHECK, 79)]
    assert {e.source for e in got} == {"nvml"} and got[2].gpu_uuid == "GPU-3"
    fault = memory.fault_since(None)
    assert fault is not None and fault[0] == "ecc"  # the first host fault; the Xid 31 is the application's


def test_remapped_rows_retired_pages_and_a_vanishing_gpu() -> None:
    nv, memory = node(), ErrorMemory()
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=lambda _: None, memory=memory)
    src.open()  # the baseline
    assert src.poll() == []
    nv.gpus[0].remapped = (0, 1, 1, 0)
    nv.gpus[1].retired = (2, 0)
    nv.gpus[2].remapped = (0, 3, 0, 1)
    assert facts(src.poll()) == [("ecc", 0, "warning", XidAction.RESET_GPU, None),
                                 ("ecc", 1, "warning", XidAction.RESET_GPU, None),
                                 ("ecc", 2, "critical", XidAction.CORDON, None)]
    assert src.poll() == []  # a pending remap is told once
    nv.gpus[3].lost = True
    (gone,) = src.poll()
    assert (gone.category, gone.gpu_index, gone.action) == ("gpu_lost", 3, XidAction.REBOOT_THEN_CHECK)
    assert src.poll() == []


def test_retired_pages_that_keep_growing_condemn_the_gpu() -> None:
    nv = node()
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=lambda _: None)
    src.open()
    got = []
    for n in (1, 2, 3, 4):
        nv.gpus[1].retired = (n, 0)
        got.append([(f.gpu_index, f.severity, f.action) for f in src.poll()])
    warn = (1, "warning", XidAction.RESET_GPU)
    assert got == [[warn], [warn], [warn, (1, "critical", XidAction.CORDON)], [warn]]  # condemned once


def test_nvml_bus_ids_name_the_gpu_of_a_kernel_xid(tmp_path: object) -> None:
    from pathlib import Path

    from vigil.collector.gpu import NvmlProbe

    probe = NvmlProbe()
    probe._nvml, probe.available = node(), True
    gpus = GpuMap(sysfs_root=Path(str(tmp_path)), probe=probe)
    assert gpus.lookup("PCI:0000:1a:00") == (2, "GPU-2") and gpus.lookup("0000:99:00") == (None, "")
