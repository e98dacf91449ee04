"""The kernel log through journald where /dev/kmsg is not readable (issue 49): a fake `journalctl` on PATH
(tests/collector/fakebin/journalctl) prints real `journalctl -o json` records of a journal file the test writes.
The fixture installs it under the test's own directory with this interpreter in its #! line, so neither the
checkout's mount options nor which `python3` comes first on PATH decide whether it runs.

The kernel log source (`collector.kernellog`, setting auto or journald) follows it: an Xid becomes its fact with
its GPU and catalog action, a record a process wrote to the kernel log (facility 1) and a line that is not a record
are skipped and counted, a line too long is cut off and counted, a binary MESSAGE (a byte array) is decoded. The
journal cursor is the saved position: a restarted source passes it as --after-cursor and reads nothing twice.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.support.waiting import wait_until
from vigil.collector.gpumap import GpuMap
from vigil.collector.journal import MAX_LINE, JournalReader, parse_entry
from vigil.collector.kernellog import JOURNAL_KEY, KernelLog
from vigil.collector.offsets import OffsetStore
from vigil.contract import Event, LogLine
from vigil.contract.xid import XidAction

pytestmark = pytest.mark.pure
FAKEBIN = Path(__file__).parent / "fakebin"
BOOT = "6c7c6013a8264c8b9b8b9e7f0b1e7a2e"
XID_79 = "NVRM: Xid (PCI:0000:86:00): 79, pid=4242, name=python, GPU has fallen off the bus."
XID_48 = "NVRM: Xid (PCI:0000:3b:00): 48, pid=4242, name=python, An uncorrectable double bit error (DBE) has been detected."


def entry(seq: int, message: str | list[int], *, transport: str = "kernel", facility: str = "0") -> dict[str, Any]:
    """A kernel record as `journalctl -o json` prints it (fields of systemd.journal-fields(7))."""
    return {"__CURSOR": f"s=739ad463348b4ceca5a9e69c95a3c93f;i={seq:x};b={BOOT};m={seq * 1000:x};t=62a0c1{seq:08x};"
                        f"x=8f7e6d5c4b3a{seq:04x}",
            "__REALTIME_TIMESTAMP": str(1765100000000000 + seq), "__MONOTONIC_TIMESTAMP": str(seq * 1000),
            "__SEQNUM": str(seq), "__SEQNUM_ID": "739ad463348b4ceca5a9e69c95a3c93f", "_BOOT_ID": BOOT,
            "_TRANSPORT": transport, "PRIORITY": "3", "SYSLOG_FACILITY": facility, "SYSLOG_IDENTIFIER": "kernel",
            "_SOURCE_MONOTONIC_TIMESTAMP": str(seq * 1000 - 7), "_HOSTNAME": "node-1", "MESSAGE": message}


class Journal:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def write(self, *lines: dict[str, Any] | bytes) -> None:
        with open(self.path, "ab") as fh:
            for line in lines:
                fh.write((line if isinstance(line, bytes) else json.dumps(line).encode()) + b"\n")

    def invocations(self) -> list[list[str]]:
        argv = Path(f"{self.path}.argv")
        return [json.loads(x) for x in argv.read_text().splitlines()] if argv.exists() else []


@pytest.fixture
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Journal:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "journalctl"
    body = (FAKEBIN / "journalctl").read_text().split("\n", 1)[1]  # without its own #! line
    fake.write_text(f"#!{sys.executable}\n{body}")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("FAKE_JOURNAL", str(tmp_path / "journal.json"))
    return Journal(tmp_path / "journal.json")


class Source:
    """The kernel log source on its own thread, as the agent runs it."""

    def __init__(self, tmp: Path, source: str) -> None:
        sysfs = tmp / "sysfs"
        for address in ("0000:3b:00.0", "0000:86:00.0"):  # GPU 0 and GPU 1
            (sysfs / "bus" / "pci" / "drivers" / "nvidia" / address).mkdir(parents=True, exist_ok=True)
        self.events: list[Event] = []
        self.log = KernelLog(path=tmp / "no-kmsg", job_id="j", host="h", store=OffsetStore(path=tmp / "offsets.json"),
                             emit=self.emit, gpus=GpuMap(sysfs_root=sysfs), rank_of_pid=lambda _p: (None, None),
                             boot_id=BOOT, poll_s=0.05, source=source)
        self.log.store.load()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self.log.run, args=(self._stop,), daemon=True)
        self._thread.start()
        try:
            wait_until(lambda: isinstance(self.log.reader, JournalReader) and self.log.reader._proc is not None, 30,
                       "journalctl started")
        except AssertionError as exc:  # say what the source holds: which reader, how often journalctl was restarted
            raise AssertionError(f"{exc}; the source's reader: {self.log.reader!r}") from None

    def emit(self, events: Sequence[Event]) -> None:
        self.events += events

    def facts(self) -> list[LogLine]:
        return [e for e in self.events if isinstance(e, LogLine)]

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive()


@pytest.fixture
def sources() -> Iterator[list[Source]]:
    held: list[Source] = []
    yield held
    for s in held:
        if s._thread.is_alive():
            s.stop()


def test_the_kernel_log_from_journald_with_its_cursor_across_a_restart(tmp_path: Path, journal: Journal,
                                                                        sources: list[Source]) -> None:
    journal.write(entry(1, XID_79))  # history: a first start follows from the end
    first = Source(tmp_path, "auto")  # /dev/kmsg (here: no-kmsg) not readable: journald
    sources.append(first)
    wait_until(lambda: journal.invocations(), 30, "journalctl following")
    long = json.dumps(entry(4, "x" * (MAX_LINE + 10))).encode()
    journal.write(entry(2, XID_48), entry(3, "NVRM: Xid (PCI:0000:86:00): 79, forged", transport="kernel", facility="1"),
                  long, b"not json", entry(5, [*XID_79.encode(), 0xFF]))
    wait_until(lambda: len(first.facts()) == 2, 30, "two kernel facts")
    xid48, xid79 = first.facts()
    assert (xid48.xid, xid48.source, xid48.gpu_index, xid48.action) == (48, "kernel", 0, XidAction.RESET_GPU)
    assert (xid79.xid, xid79.gpu_index, xid79.message.endswith("\ufffd")) == (79, 1, True)  # the byte array
    reader = first.log.reader
    assert isinstance(reader, JournalReader)
    assert (first.log.user_records, reader.malformed) == (1, 2)  # the process's record; the long line, not json
    wait_until(lambda: (first.log.store.load().get(JOURNAL_KEY) or {}).get("cursor") == entry(5, "")["__CURSOR"], 30,
               "the cursor saved")
    first.stop()

    journal.write(entry(6, XID_79.replace("86:00", "3b:00")))  # while no agent runs
    second = Source(tmp_path, "journald")
    sources.append(second)
    wait_until(lambda: len(journal.invocations()) == 2, 30, "journalctl following again")
    journal.write(entry(7, XID_48.replace("3b:00", "86:00")))
    wait_until(lambda: len(second.facts()) == 2, 30, "the facts written while down and after")
    assert [(f.xid, f.gpu_index) for f in second.facts()] == [(79, 0), (48, 1)]  # nothing read twice
    ids = [f.event_id for f in [*first.facts(), *second.facts()]]
    assert len(ids) == len(set(ids)) == 4
    assert [a[-1] for a in journal.invocations()] == ["--lines=0", f"--after-cursor={entry(5, '')['__CURSOR']}"]


def test_journal_records_parse_as_the_kernels() -> None:
    cursor, record = parse_entry(json.dumps(entry(9, XID_79)).encode()) or ("", None)
    assert record is not None and cursor.startswith("s=739ad") and record.cursor == cursor
    assert (record.facility, record.level, record.usec, record.seq, record.message) == (0, 3, 8993, 9, XID_79)
    stdout = parse_entry(json.dumps(entry(9, XID_79, transport="stdout", facility="0")).encode())
    assert stdout is not None and stdout[1].facility >= 1  # not the kernel's transport: never a kernel fact
    repeated = {**entry(9, XID_79), "MESSAGE": [XID_79, "second value"]}
    assert (parse_entry(json.dumps(repeated).encode()) or ("", None))[1].message == XID_79  # type: ignore[union-attr]
    assert parse_entry(json.dumps({**entry(9, XID_79), "MESSAGE": None}).encode()) is None  # left out: too large
    assert parse_entry(b"[1, 2]") is None and parse_entry(b"{") is None
    odd = parse_entry(json.dumps({**entry(9, XID_79), "PRIORITY": "\u00b2", "__SEQNUM": "\u0663"}).encode())
    assert odd is not None and (odd[1].level, odd[1].seq) != (2, 3)  # non-ASCII digits: defaults, never a raise
