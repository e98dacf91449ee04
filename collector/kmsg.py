"""The kernel log's records (`/dev/kmsg`, Documentation/ABI/testing/dev-kmsg): parse and follow them.

A record is `pri,seq,usec,flags[,...];message\\n`, followed by continuation lines ` KEY=VALUE\\n` (the device,
e.g. ` SUBSYSTEM=pci`, ` DEVICE=+pci:0000:3b:00.0`). The kernel escapes unprintable bytes and backslashes as
`\\xNN`. On the real device each read() returns exactly one record, EPIPE means the record at the reader's
position was overwritten (the ring wrapped: counted in `wrapped`), and the reader starts at the ring's first
record; a sequence number jumping ahead means records were lost (counted in `lost`). A plain file or FIFO
(tests, a journald export) is read line by line. Records are bounded (`MAX_RECORD` bytes; longer ones are cut).

`KmsgReader` starts after `after_seq` (a saved position: nothing read twice across a restart), or at the end of
what the log holds now (`from_end`: a first start), or at its beginning.
"""

from __future__ import annotations

import errno
import os
import re
import select
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

MAX_RECORD = 8192
_ESCAPE = re.compile(rb"\\x([0-9a-fA-F]{2})")


@dataclass(frozen=True, kw_only=True)
class KmsgRecord:
    seq: int
    usec: int
    level: int  # 0 emerg .. 7 debug
    facility: int  # 0 kernel
    message: str
    fields: dict[str, str] = field(default_factory=dict)
    cursor: str = ""  # read from journald (`collector.journal`): the journal's cursor of the record


def _unescape(raw: bytes) -> str:
    if b"\\x" in raw:
        raw = _ESCAPE.sub(lambda m: bytes([int(m[1], 16)]), raw)
    return raw.decode("utf-8", "replace")


def parse_record(raw: bytes) -> KmsgRecord | None:
    """One record (its header line and continuation lines); None when the header is not `pri,seq,usec,flags;`."""
    raw = raw[:MAX_RECORD]
    head, _, rest = raw.partition(b"\n")
    prefix, sep, message = head.partition(b";")
    parts = prefix.split(b",", 3)
    if not sep or len(parts) < 4 or not (parts[0].isdigit() and parts[1].isdigit() and parts[2].isdigit()):
        return None
    pri = int(parts[0])
    fields: dict[str, str] = {}
    if rest:
        for line in rest.split(b"\n"):
            if line.startswith(b" ") and b"=" in line:
                key, _, value = line[1:].partition(b"=")
                fields[_unescape(key)] = _unescape(value)
    return KmsgRecord(seq=int(parts[1]), usec=int(parts[2]), level=pri & 7, facility=pri >> 3,
                      message=_unescape(message).rstrip("\r"), fields=fields)


@dataclass(kw_only=True)
class KmsgReader:
    path: Path
    after_seq: int | None = None
    from_end: bool = False
    last_seq: int | None = None
    lost: int = 0  # records the kernel overwrote before they were read (sequence gaps)
    wrapped: int = 0  # EPIPE reads: the ring buffer wrapped past the reader
    malformed: int = 0
    _fd: int = field(default=-1, init=False, repr=False)
    _device: bool = field(default=False, init=False, repr=False)
    _buffer: bytes = field(default=b"", init=False, repr=False)
    _pending: list[bytes] = field(default_factory=list, init=False, repr=False)

    def open(self) -> None:
        """Open the log (OSError when it cannot be read) and place the reader."""
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        mode = os.fstat(self._fd).st_mode
        self._device = stat.S_ISCHR(mode)
        self.last_seq = self.after_seq
        if not self.from_end or self.after_seq is not None:
            return
        if self._device:
            os.lseek(self._fd, 0, os.SEEK_END)
        elif stat.S_ISREG(mode):  # a file: what it holds is history; note its last sequence number
            for record in self._drain():
                self.last_seq = record.seq

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def wait(self, timeout_s: float, wake: threading.Event | None = None) -> None:
        """Until the device has a record (a file or FIFO: the timeout, or `wake` set). poll(2), never select(2): in an
        agent with many files open the descriptor may be numbered 1024 or more, out of select's range."""
        if self._device:
            readable(self._fd, timeout_s)
        elif wake is not None:
            wake.wait(timeout_s)
        else:
            time.sleep(timeout_s)

    def read(self, limit: int = 1000) -> list[KmsgRecord]:
        """The new records available now (at most about `limit`), in order, gaps counted."""
        out: list[KmsgRecord] = []
        for record in self._drain(limit):
            if self.last_seq is not None:
                if record.seq <= self.last_seq:
                    continue  # read before (a restart's saved position), or the file went back
                self.lost += record.seq - self.last_seq - 1
            self.last_seq = record.seq
            out.append(record)
        return out

    def _drain(self, limit: int = 1 << 30) -> list[KmsgRecord]:
        raws = self._read_device(limit) if self._device else self._read_file(limit)
        out = []
        for raw in raws:
            record = parse_record(raw)
            if record is None:
                self.malformed += 1
            else:
                out.append(record)
        return out

    def _read_device(self, limit: int) -> list[bytes]:
        out: list[bytes] = []
        while len(out) < limit:
            try:
                chunk = os.read(self._fd, MAX_RECORD)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    self.wrapped += 1
                    continue
                raise
            if not chunk:
                break
            out.append(chunk)
        return out

    def _read_file(self, limit: int) -> list[bytes]:
        while len(self._pending) < limit:
            try:
                chunk = os.read(self._fd, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._buffer += chunk
            *lines, self._buffer = self._buffer.split(b"\n")
            if len(self._buffer) > MAX_RECORD:  # a line without end: cut it, skip the rest of it
                self._buffer = self._buffer[:MAX_RECORD]
            for line in lines:
                if line.startswith(b" ") and self._pending:
                    if len(self._pending[-1]) < MAX_RECORD:
                        self._pending[-1] += b"\n" + line
                elif line.strip():
                    self._pending.append(line[:MAX_RECORD])
        out, self._pending = self._pending, []
        return out


def readable(fd: int, timeout_s: float) -> None:
    """Wait until `fd` is readable (or hung up) or `timeout_s` passed; any descriptor number (poll, not select)."""
    waiter = select.poll()
    waiter.register(fd, select.POLLIN)
    waiter.poll(max(0.0, timeout_s) * 1000)
