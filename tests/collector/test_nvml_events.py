"""NVML as a source (pynvml test double): Xid and ECC events, remapped rows, retired pages, a GPU that vanishes."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import pytest

from tests.support.fake_nvml import FakeGpu, FakeNvml
from tests.support.waiting import wait_until
from vigil.collector.gpumap import GpuMap
from vigil.collector.nvmlevents import NvmlEvents
from vigil.collector.summary import ErrorMemory
from vigil.contract import Event, LogLine
from vigil.contract.xid import XidAction

pytestmark = pytest.mark.pure


def node() -> FakeNvml:
    return FakeNvml(gpus=[FakeGpu(uuid=f"GPU-{i}", bus_id=f"00000000:{0x18 + i:02X}:00.0") for i in range(4)])


def into(got: list[LogLine]) -> Callable[[Sequence[Event]], None]:
    return lambda events: got.extend(e for e in events if isinstance(e, LogLine))


def facts(events: list[LogLine]) -> list[tuple[str, int | None, str, XidAction | None, int | None]]:
    return [(e.category, e.gpu_index, e.severity, e.action, e.xid) for e in events]


def test_xid_and_ecc_events_through_the_waiting_thread() -> None:
    nv, memory = node(), ErrorMemory()
    got: list[LogLine] = []
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=into(got), memory=memory, wait_ms=50)
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
    got: list[list[tuple[int | None, str, XidAction | None]]] = []
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


def test_each_counter_is_read_on_its_own() -> None:
    """NOT_SUPPORTED for one counter hides no other: remapped rows before Ampere, retired pages on A100/H100."""
    nv = node()
    nv.gpus[0].unsupported = frozenset({"nvmlDeviceGetRemappedRows"})  # a V100: retired pages only
    nv.gpus[1].unsupported = frozenset({"nvmlDeviceGetRetiredPages", "nvmlDeviceGetRetiredPagesPendingStatus"})
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=lambda _: None)
    src.open()
    nv.gpus[0].retired = (0, 2)
    nv.gpus[1].remapped = (0, 1, 1, 0)
    got = src.poll()
    assert facts(got) == [("ecc", 0, "warning", XidAction.RESET_GPU, None), ("ecc", 1, "warning", XidAction.RESET_GPU, None)]
    assert "2 more retired pages" in got[0].message and "row remapping pending" in got[1].message


def test_a_pending_page_retirement_calls_for_a_reset_once() -> None:
    nv = node()
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=lambda _: None)
    src.open()
    nv.gpus[2].retire_pending = True
    (pending,) = src.poll()
    assert (pending.category, pending.gpu_index, pending.severity, pending.action, pending.gpu_uuid) == \
        ("ecc", 2, "warning", XidAction.RESET_GPU, "GPU-2")
    assert "retirement pending" in pending.message
    assert src.poll() == []  # told once while it stays pending


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_nvlink_error_counters_growth_crc_rising_and_a_link_going_inactive() -> None:
    nv, clock, memory = node(), Clock(), ErrorMemory()
    nv.gpus[0].nvlinks = {0: {}, 1: {}, 2: {}}
    nv.gpus[0].inactive = {2}  # never active here: an unused link, no fact
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=lambda _: None, clock=clock, report_s=60, memory=memory)
    src.open()
    asked = nv.calls["nvmlDeviceGetNvLinkState"]
    assert src.poll() == []
    assert nv.calls["nvmlDeviceGetNvLinkState"] - asked == 3  # links that raised NOT_SUPPORTED are not asked again
    nv.gpus[0].nvlinks[0] = {0: 5, 1: 1}  # replays, a recovery
    clock.now += 10
    got = src.poll()
    assert [(e.category, e.gpu_index, e.gpu_uuid, e.severity, e.action) for e in got] == \
        [("nvlink", 0, "GPU-0", "warning", XidAction.WATCH)] * 2
    assert [e.message for e in got] == ["NVML: NVLink link 0 replays +5 (now 5)", "NVML: NVLink link 0 recoveries +1 (now 1)"]
    nv.gpus[0].nvlinks[0] = {0: 7, 1: 1}
    clock.now += 10
    assert src.poll() == []  # within report_s: held
    clock.now += 60
    (late,) = src.poll()
    assert late.message == "NVML: NVLink link 0 replays +2 (now 7)"
    warn = ("warning", XidAction.WATCH)
    trickle = []
    for n in (1, 2, 3):  # a CRC trickle (corrected by replay): watched, never condemned
        nv.gpus[0].nvlinks[1] = {2: n * 10, 3: n}
        clock.now += 100
        trickle.append([(e.severity, e.action) for e in src.poll()])
    assert trickle == [[warn, warn]] * 3
    crc = []
    for n in (1, 2, 3):  # CRC flit errors at 200/s, past DCGM's 100/s, in 3 reports within a day: condemned
        nv.gpus[0].nvlinks[1] = {2: 30 + n * 20_000, 3: 3}
        clock.now += 100
        crc.append([(e.severity, e.action) for e in src.poll()])
    assert crc == [[warn], [warn], [warn, ("error", XidAction.CORDON)]]  # CRC rising fast: an error
    fault = memory.fault_since(None)
    assert fault is not None and fault[0] == "nvlink"  # a host fault a failed rank's exit reports
    nv.gpus[0].inactive = {1, 2}
    assert src.poll() == []  # inactive for a moment (a GPU reset retrains its links): not yet
    nv.gpus[0].inactive = {2}
    clock.now += 20
    assert src.poll() == []  # back
    nv.gpus[0].inactive = {1, 2}
    assert src.poll() == []
    clock.now += 30
    (down,) = src.poll()
    assert (down.category, down.severity, down.action, down.message) == \
        ("nvlink", "error", XidAction.CORDON, "NVML: NVLink link 1 inactive for 30 s")
    assert src.poll() == []  # once


def test_counters_are_compared_with_the_saved_values_across_an_agent_restart(tmp_path: object) -> None:
    """A restarted agent compares its first poll with what the last one saved (by UUID): growth while it was down is
    growth, growths counted before the restart still count toward condemning; a swapped GPU starts fresh."""
    from pathlib import Path

    from vigil.collector.offsets import OffsetStore

    path, nv = Path(str(tmp_path)) / "offsets.json", node()
    nv.gpus[0].nvlinks = {0: {}}
    first = NvmlEvents(nvml=nv, job_id="j", host="h", emit=lambda _: None, store=OffsetStore(path=path))
    first.open()
    for n in (1, 2):  # two growths: one short of condemning
        nv.gpus[1].retired = (n, 0)
        assert [f.severity for f in first.poll()] == ["warning"]
    # the agent stops; while it is down GPU 1 retires a page, GPU 0's link replays, GPU 3 is swapped for another
    nv.gpus[1].retired = (3, 0)
    nv.gpus[0].nvlinks[0] = {0: 4}
    nv.gpus[3] = FakeGpu(uuid="GPU-new", bus_id=nv.gpus[3].bus_id, retired=(9, 0))
    got: list[LogLine] = []
    store = OffsetStore(path=path)
    store.load()
    second = NvmlEvents(nvml=nv, job_id="j", host="h", emit=into(got), store=store)
    second.open()
    assert [(e.category, e.gpu_index, e.severity, e.action) for e in got] == [
        ("nvlink", 0, "warning", XidAction.WATCH),
        ("ecc", 1, "warning", XidAction.RESET_GPU), ("ecc", 1, "critical", XidAction.CORDON)]  # the third growth
    assert got[0].message == "NVML: NVLink link 0 replays +4 (now 4)" and "1 more retired pages (3 in all)" in got[1].message
    saved = store.get("nvml")
    assert set(saved) == {"GPU-0", "GPU-1", "GPU-2", "GPU-new"} and saved["GPU-new"]["counters"]["pages"] == 9
    assert saved["GPU-0"]["links"] == {"0": {"crc_flit": 0, "crc_data": 0, "replay": 4, "recovery": 0}}


def test_without_nvml_the_driver_procfs_gives_each_gpu_its_uuid(tmp_path: object) -> None:
    """The sysfs fallback's index, and the UUID from `<procfs>/driver/nvidia/gpus/<address>/information`."""
    from pathlib import Path

    root = Path(str(tmp_path))
    sysfs, procfs = root / "sys", root / "proc"
    for n, address in enumerate(("0000:3b:00.0", "0000:1a:00.0", "0000:5c:00.0")):
        (sysfs / "bus" / "pci" / "drivers" / "nvidia" / address).mkdir(parents=True)
        info = procfs / "driver" / "nvidia" / "gpus" / address
        info.mkdir(parents=True)
        if n < 2:  # the third's information file is missing: no UUID, still an index
            (info / "information").write_text(f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 17\n"
                                              f"GPU UUID: \t GPU-{n}a2b3c4d-0000-1111-2222-333344445555\n"
                                              f"Video BIOS: \t 96.00.99.00.01\nBus Location: \t {address}\n")
    gpus = GpuMap(sysfs_root=sysfs, procfs_root=procfs)
    assert gpus.lookup("PCI:0000:1a:00") == (0, "GPU-1a2b3c4d-0000-1111-2222-333344445555")
    assert gpus.lookup("PCI:0000:3b:00") == (1, "GPU-0a2b3c4d-0000-1111-2222-333344445555")
    assert gpus.lookup("0000:5c:00.0") == (2, "")
    (sysfs / "bus").rename(root / "elsewhere")  # no driver directory in sysfs: the driver's procfs names them
    assert GpuMap(sysfs_root=sysfs, procfs_root=procfs).lookup("PCI:0000:3b:00") == \
        (1, "GPU-0a2b3c4d-0000-1111-2222-333344445555")


def test_a_gpu_lost_while_its_links_are_read_keeps_what_its_counters_showed() -> None:
    """The poll that condemns a GPU (its retired pages grew a third time) and then finds it lost at its NVLink reads
    ships both: the condemnation is counted once by `Rising`, so dropping it would lose it for good."""
    nv, clock = node(), Clock()
    nv.gpus[0].nvlinks = {0: {}}
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=lambda _: None, clock=clock)
    src.open()
    for n in (1, 2):
        nv.gpus[0].retired = (n, 0)
        clock.now += 100
        src.poll()
    nv.gpus[0].retired = (3, 0)
    read_links = nv.nvmlDeviceGetNvLinkState

    def lost_now(h: object, link: int) -> object:
        nv.gpus[0].lost = True  # the GPU falls off the bus between the counters and the links
        return read_links(h, link)

    nv.nvmlDeviceGetNvLinkState = lost_now  # type: ignore[method-assign]
    clock.now += 100
    got = [(e.category, e.severity, e.action) for e in src.poll()]
    assert ("ecc", "critical", XidAction.CORDON) in got and ("gpu_lost", "critical", XidAction.REBOOT_THEN_CHECK) in got


def test_a_damaged_saved_state_is_a_fresh_baseline_not_a_dead_source(tmp_path: object) -> None:
    """Saved NVML counters that do not parse (a hand edit, a torn disk) start that GPU afresh; the source runs."""
    import json
    from pathlib import Path

    from vigil.collector.offsets import OffsetStore

    path = Path(str(tmp_path)) / "offsets.json"
    path.write_text(json.dumps({"nvml": {"GPU-0": {"counters": {"pages": 1}, "links": {"²": {}, "0": {"crc_flit": 1}},
                                                   "grew": {"gpu": ["x", 1e400], "²": [1.0]}}}}))
    nv = node()
    src = NvmlEvents(nvml=nv, job_id="j", host="h", emit=lambda _: None, store=OffsetStore(path=path))
    src.open()
    nv.gpus[0].retired = (2, 0)
    assert [(e.category, e.gpu_index) for e in src.poll()] == [("ecc", 0)]  # compared with the saved 1 page
