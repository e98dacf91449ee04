"""One Xid the kernel log and NVML both report ships once (issue 49): the real sources, the agent's filter."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.fake_nvml import FakeGpu, FakeNvml
from tests.support.kmsg_lines import XID
from vigil.collector.gpumap import GpuMap
from vigil.collector.kernellog import KernelLog
from vigil.collector.kmsg import KmsgRecord
from vigil.collector.nvmlevents import NvmlEvents
from vigil.collector.offsets import OffsetStore
from vigil.collector.xiddedupe import XidDedupe
from vigil.contract import Event, LogLine

pytestmark = pytest.mark.pure


def test_an_xid_from_the_kernel_log_and_nvml_is_one_event(tmp_path: Path) -> None:
    driver = tmp_path / "bus" / "pci" / "drivers" / "nvidia"
    for address in ("0000:3b:00.0", "0000:86:00.0"):  # kernel GPU 0 and 1, NVML's bus ids in the same order
        (driver / address).mkdir(parents=True)
    now = [0.0]
    dedupe, shipped = XidDedupe(window_s=10.0, clock=lambda: now[0]), list[Event]()
    emit = dedupe.wrap(shipped.extend)
    nv = FakeNvml(gpus=[FakeGpu(uuid=f"GPU-{i}", bus_id=b) for i, b in enumerate(("00000000:3B:00.0",
                                                                                  "00000000:86:00.0"))])
    nvml = NvmlEvents(nvml=nv, job_id="j", host="h", emit=emit)
    nvml.open()
    kernel = KernelLog(path=tmp_path / "kmsg", job_id="j", host="h", store=OffsetStore(path=tmp_path / "o.json"),
                       emit=emit, gpus=GpuMap(sysfs_root=tmp_path), rank_of_pid=lambda _: (None, None))
    seq = iter(range(1, 100))

    def kmsg(code: int) -> None:
        emit(kernel.handle(KmsgRecord(seq=next(seq), usec=1, level=3, facility=0, message=XID[code])))

    def nvml_xid(gpu: int, code: int) -> None:
        nv.raise_xid(gpu, code)
        emit(nvml.wait_once())

    kmsg(94)
    nvml_xid(0, 94)  # the same Xid through NVML: paired, dropped
    assert [(e.source, e.gpu_index, e.xid) for e in shipped if isinstance(e, LogLine)] == [("kernel", 0, 94)]
    nvml_xid(0, 94)  # a second occurrence (NVML's own repeat) counts
    nvml_xid(1, 94)  # another GPU: another fault
    kmsg(48)  # Xid 48 on GPU 1, NVML's copy arrives first next
    nvml_xid(1, 48)
    now[0] = 30.0  # past the window: the unpaired NVML report of GPU 0 is forgotten, a new kernel one counts
    kmsg(94)
    got = [(e.source, e.gpu_index, e.xid) for e in shipped if isinstance(e, LogLine)]
    assert got == [("kernel", 0, 94), ("nvml", 0, 94), ("nvml", 1, 94), ("kernel", 1, 48), ("kernel", 0, 94)]
    assert dedupe.duplicates == 2
