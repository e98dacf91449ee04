"""The kernel log reader and classifier (pure): record format, positions, gaps, and each line class."""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.kmsg_lines import (
    AER,
    AER_CORRECTED,
    EDAC_CE,
    EDAC_UE,
    LINK_DOWN,
    MCE,
    NOISE,
    OOM,
    OOM_KILL,
    SXID,
    XID,
    FakeKmsg,
)
from tests.support.waiting import wait_until
from vigil.collector.gpumap import GpuMap, pci_key
from vigil.collector.kernelrules import classify_kernel
from vigil.collector.kmsg import MAX_RECORD, KmsgReader, parse_record, readable
from vigil.contract.xid import XidAction

pytestmark = pytest.mark.pure


def test_a_record_with_its_continuation_lines_and_escapes() -> None:
    r = parse_record(b"4,1234,5678901,-,caller=T12;mlx5_core 0000:5e:00.0: tab\\x09here \\x5c ok\n"
                     b" SUBSYSTEM=pci\n DEVICE=+pci:0000:5e:00.0\n")
    assert r is not None
    assert (r.seq, r.usec, r.level, r.facility) == (1234, 5678901, 4, 0)
    assert r.message == "mlx5_core 0000:5e:00.0: tab\there \\ ok"
    assert r.fields == {"SUBSYSTEM": "pci", "DEVICE": "+pci:0000:5e:00.0"}
    assert parse_record(b"not a record") is None and parse_record(b"a,b,c,-;x") is None
    assert len(parse_record(b"6,1,1,-;" + b"x" * 100_000).message) < MAX_RECORD  # type: ignore[union-attr]


def test_the_reader_follows_resumes_and_counts_gaps(tmp_path: Path) -> None:
    kmsg = FakeKmsg(tmp_path / "kmsg")
    kmsg.write("boot 1", "boot 2")
    first = KmsgReader(path=kmsg.path, from_end=True)
    first.open()
    assert first.last_seq == 2 and first.read() == []  # a first start: what the log holds is history
    kmsg.write("a", "b")
    assert [r.message for r in first.read()] == ["a", "b"]
    kmsg.write("c", skip=3)  # three records the ring overwrote before anyone read them
    assert [r.message for r in first.read()] == ["c"] and first.lost == 3
    first.close()
    kmsg.write("d")
    again = KmsgReader(path=kmsg.path, after_seq=first.last_seq)  # a restart from the saved position
    again.open()
    assert [r.message for r in again.read()] == ["d"] and again.lost == 0
    fresh = KmsgReader(path=kmsg.path)  # a new boot: the ring from its start
    fresh.open()
    assert [r.message for r in fresh.read()][:2] == ["boot 1", "boot 2"]


def test_a_partial_last_line_waits_for_its_end(tmp_path: Path) -> None:
    path = tmp_path / "kmsg"
    path.write_bytes(b"3,1,10,-;NVRM: Xid (PCI:0000:3b:00): 7")
    reader = KmsgReader(path=path)
    reader.open()
    assert reader.read() == []
    with open(path, "ab") as fh:
        fh.write(b"9, pid=1, name=x, GPU has fallen off the bus.\n")
    (record,) = reader.read()
    assert classify_kernel(record.message).xid == 79  # type: ignore[union-attr]


@pytest.mark.parametrize(("line", "category", "severity", "action", "xid", "pci", "pid"), [
    (XID[13], "xid", "error", XidAction.RESTART_JOB, 13, "0000:3b:00", 4242),
    (XID[31], "xid", "error", XidAction.RESTART_JOB, 31, "0000:3b:00", 4242),
    (XID[48], "xid", "critical", XidAction.RESET_GPU, 48, "0000:86:00", 4243),
    (XID[79], "xid", "critical", XidAction.REBOOT_THEN_CHECK, 79, "0000:86:00", None),
    (XID[94], "xid", "error", XidAction.RESET_GPU, 94, "0000:3b:00", 4242),
    ("NVRM: Xid (PCI:0000:3b:00): 999, pid=1, something new", "xid", "critical", XidAction.INVESTIGATE, 999,
     "0000:3b:00", 1),
    (SXID, "sxid", "critical", XidAction.CORDON, None, "0000:c5:00.0", None),
    (AER, "pcie_aer", "critical", XidAction.REBOOT_THEN_CHECK, None, "0000:86:00.0", None),
    (AER_CORRECTED, "pcie_aer", "warning", XidAction.WATCH, None, "0000:3b:00.0", None),
    (LINK_DOWN, "nic_link_down", "error", XidAction.WATCH, None, "0000:5e:00.0", None),
    (OOM, "oom", "error", XidAction.RESTART_JOB, None, "", 4242),
    (OOM_KILL, "oom", "error", XidAction.RESTART_JOB, None, "", 4242),
    (EDAC_UE, "host_memory", "critical", XidAction.CORDON, None, "", None),
    (EDAC_CE, "host_memory", "warning", XidAction.WATCH, None, "", None),
    (MCE, "mce", "error", XidAction.INVESTIGATE, None, "", None),
])
def test_each_line_class(line: str, category: str, severity: str, action: XidAction, xid: int | None, pci: str,
                         pid: int | None) -> None:
    fact = classify_kernel(line)
    assert fact is not None
    assert (fact.category, fact.severity, fact.action, fact.xid, fact.pci, fact.pid) == \
        (category, severity, action, xid, pci, pid)


def test_noise_and_lookalikes_are_nothing() -> None:
    assert classify_kernel(NOISE) is None
    assert classify_kernel("python[4242]: printed NVRM Xid 79 to be funny") is None
    long = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, " + "x" * 8000
    assert classify_kernel(long) is not None  # linear, bounded
    # a driver's words anywhere but where the driver names itself are text the kernel quotes (attacker's review)
    assert classify_kernel("x" * 8000 + " NVRM: Xid (PCI:0000:3b:00): 79, pid=1") is None


@pytest.mark.parametrize("message", [
    # a segfault in a file the process named like an Xid line: the kernel quotes the file's name
    "python3[30165]: segfault at 7f3a ip 7f3a sp 7ffd error 15 in NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has "
    "fallen off the bus.[7f3a00000000+1000]",
    # a process named (15 characters) like an EDAC line, quoted with its pid
    "EDAC MC0: 1 UE [1234]: segfault at 0 ip 0 sp 0 error 4 in x[400000+1000]",
    "traps: NVRM: Xid (PC[77] general protection fault ip:0 sp:0 error:0",
])
def test_text_the_kernel_quotes_from_a_process_is_no_hardware_fact(message: str) -> None:
    assert classify_kernel(message) is None


def test_pci_addresses_name_gpus_through_sysfs(tmp_path: Path) -> None:
    driver = tmp_path / "bus" / "pci" / "drivers" / "nvidia"
    for address in ("0000:86:00.0", "0000:3b:00.0", "0000:5e:00.0"):
        (driver / address).mkdir(parents=True)
    (driver / "new_id").touch()  # the driver's own files are not devices
    gpus = GpuMap(sysfs_root=tmp_path)
    assert gpus.lookup("0000:3b:00") == (0, "") and gpus.lookup("PCI:0000:86:00") == (2, "")
    assert gpus.lookup("0000:99:00") == (None, "") and gpus.lookup("garbage") == (None, "")
    assert pci_key("00000000:3B:00.0") == pci_key("0000:3b:00") == (0, 0x3B, 0)


def test_a_state_directory_that_refuses_the_position_does_not_stop_the_reader(tmp_path: Path) -> None:
    """An unwritable state directory never stops the kernel log: its position is not saved (counted, logged when the
    store raises) and the facts still flow."""
    from vigil.collector.gpumap import GpuMap
    from vigil.collector.kernellog import KernelLog
    from vigil.collector.offsets import OffsetStore

    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    emitted: list[object] = []
    kernel = KernelLog(path=kmsg, job_id="j", host="h", store=OffsetStore(path=blocker / "state" / "o.json"),
                       emit=emitted.extend, gpus=GpuMap(sysfs_root=tmp_path), rank_of_pid=lambda _: (None, None))
    assert kernel.open()
    with kmsg.open("a") as fh:
        fh.write("3,1,1000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n")
    kernel.poll()
    kernel.poll()
    assert kernel.facts == 1 and any(getattr(e, "xid", None) == 79 for e in emitted)


@pytest.fixture
def high_descriptors() -> Iterator[None]:
    """The next descriptors this process opens are numbered past 1024, as in an agent (or a long test session) with
    many files open: select(2) cannot wait on them (`ValueError: filedescriptor out of range`)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 1200
    if hard != resource.RLIM_INFINITY and hard < need:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} < {need}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    fillers: list[int] = []
    try:
        while not fillers or fillers[-1] < 1030:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        for fd in fillers[-4:]:  # free a few above 1024: the next open lands there
            os.close(fd)
        del fillers[-4:]
        yield
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_waiting_on_a_descriptor_past_1024_works(high_descriptors: None) -> None:
    r, w = os.pipe()
    try:
        assert r >= 1024
        readable(r, 0.01)  # nothing to read: it returns at the timeout, never raises
        os.write(w, b"x")
        readable(r, 60)  # a byte to read: at once
        assert os.read(r, 1) == b"x"
        device = KmsgReader(path=Path("/dev/null"))  # a character device, as /dev/kmsg is
        device.open()
        try:
            device.wait(0.01)
        finally:
            device.close()
    finally:
        os.close(r)
        os.close(w)


def test_caught_up_reads_past_a_record_logged_before_the_call(tmp_path: Path) -> None:
    """A rank's exit is noticed while the kernel log thread waits out its interval: `caught_up` has it read now, so
    the Xid the driver logged before the exit is in the error memory when the exit is reported (with a 30 s interval
    and no wake this waits 30 s and answers False; a read that stopped at its limit would miss the Xid after a burst)."""
    import threading
    import time
    from datetime import UTC, datetime, timedelta

    from vigil.collector.gpumap import GpuMap
    from vigil.collector.kernellog import KernelLog
    from vigil.collector.offsets import OffsetStore
    from vigil.collector.summary import ErrorMemory

    kmsg = tmp_path / "kmsg"
    kmsg.write_text("")
    memory = ErrorMemory()
    kernel = KernelLog(path=kmsg, job_id="j", host="h", store=OffsetStore(path=tmp_path / "o.json"),
                       emit=lambda _: None, gpus=GpuMap(sysfs_root=tmp_path), rank_of_pid=lambda _: (None, None),
                       memory=memory, poll_s=30.0)
    assert not kernel.caught_up(0.0)  # not followed yet: nothing to wait for
    stop = threading.Event()
    thread = threading.Thread(target=kernel.run, args=(stop,), daemon=True)
    thread.start()
    try:
        wait_until(lambda: kernel.following, timeout=10, what="the kernel log thread opened its log")
        assert kernel.caught_up(5.0)  # the first read
        since = datetime.now(UTC) - timedelta(seconds=60)
        with kmsg.open("a") as fh:  # a burst past one read's limit (1,000), then the Xid, stamped now on the boot clock
            for seq in range(1, 1501):
                fh.write(f"6,{seq},{time.monotonic_ns() // 1000},-;pcieport 0000:00:01.0: noise {seq}\n")
            fh.write(f"3,1501,{time.monotonic_ns() // 1000},-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen "
                     "off the bus.\n")
        assert memory.fault_since(since) is None  # the thread waits out its 30 s
        assert kernel.caught_up(5.0)
        fault = memory.fault_since(since)
        assert fault is not None and fault[0] == "xid"
    finally:
        stop.set()
        kernel.interrupt()
        thread.join(timeout=5.0)
    assert not thread.is_alive() and not kernel.caught_up(5.0)  # no longer followed: answers at once
