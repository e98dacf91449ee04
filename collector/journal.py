"""The kernel log through journald, where `/dev/kmsg` is not readable: `journalctl -k -o json --follow`.

`JournalReader` runs `journalctl --dmesg --output=json --follow --no-pager` (the kernel's records of the current
boot) and reads one JSON object per line from its pipe, without blocking (the kernel log's own thread calls it;
a silent or stuck journalctl stalls nothing else). Its position is the journal cursor (`__CURSOR`) of the last
record read: a restart passes it as `--after-cursor`, so no record is read twice; a first start follows from
the end (`--lines=0`), as `/dev/kmsg` does. A cursor from an earlier boot reads the current boot from its start
(`--dmesg` implies the current boot). Records are turned into `KmsgRecord`s: `MESSAGE` (text, or a byte array
for binary data: decoded, bad bytes replaced), `PRIORITY` the level, `SYSLOG_FACILITY` the facility, the boot-time
stamp `_SOURCE_MONOTONIC_TIMESTAMP` (else `__MONOTONIC_TIMESTAMP`) and `__SEQNUM`. Only `_TRANSPORT=kernel` with
facility 0 is the kernel's own word; anything else keeps its facility (>= 1), which the kernel log skips and
counts. Lines are bounded (`MAX_LINE`: a longer one is cut off, skipped and counted malformed), messages by
`MAX_RECORD`. A journalctl that exits is started again after its cursor (at most every `RESTART_S`); one that
cannot be started at first is an OSError, as an unreadable `/dev/kmsg` is. Reference: systemd's Journal JSON Format
(https://systemd.io/JOURNAL_EXPORT_FORMATS/) and systemd.journal-fields(7).
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from vigil.collector.kmsg import MAX_RECORD, KmsgRecord, readable

log = logging.getLogger(__name__)
MAX_LINE = 64 << 10  # a kernel record's JSON line: its message (<= ~1 KiB in the ring) and a few dozen fields
RESTART_S = 10.0  # a journalctl that ended or would not start is started again at most this often
NOT_KERNEL = 1  # the facility a record gets that did not come from the kernel's transport (LOG_USER)


def _text(value: Any) -> str | None:
    """A field's value: a string, a byte array (binary data), or a list of values (the field was repeated: the
    first); None when journalctl left it out (null: larger than its limit)."""
    if isinstance(value, list) and value and all(type(b) is int and 0 <= b < 256 for b in value):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, list):
        return _text(value[0]) if value else None
    return value if isinstance(value, str) else None


def _int(value: Any, default: int) -> int:
    text = _text(value)
    ascii_digits = text is not None and text.isascii() and text.isdigit()  # "²" is a digit int() refuses
    return int(text) if ascii_digits and text is not None and len(text) <= 20 else default


def parse_entry(line: bytes) -> tuple[str, KmsgRecord] | None:
    """(cursor, record) of one `journalctl -o json` line; None when it is not a journal entry with a message."""
    try:
        doc = json.loads(line)
    except ValueError:
        return None
    if not isinstance(doc, dict):
        return None
    cursor, message = _text(doc.get("__CURSOR")), _text(doc.get("MESSAGE"))
    if not cursor or message is None or len(cursor) > 1024:
        return None
    kernel = _text(doc.get("_TRANSPORT")) == "kernel"
    facility = _int(doc.get("SYSLOG_FACILITY"), 0 if kernel else NOT_KERNEL)
    usec = _int(doc.get("_SOURCE_MONOTONIC_TIMESTAMP"), _int(doc.get("__MONOTONIC_TIMESTAMP"), 0))
    record = KmsgRecord(seq=_int(doc.get("__SEQNUM"), 0), usec=usec, level=_int(doc.get("PRIORITY"), 6) & 7,
                        facility=facility if kernel else max(facility, NOT_KERNEL),
                        message=message[:MAX_RECORD].rstrip("\r\n"), cursor=cursor)
    return cursor, record


@dataclass(kw_only=True)
class JournalReader:
    """The kernel log's records from journald, with `KmsgReader`'s interface (`collector.kmsg`)."""

    journalctl: str = "journalctl"
    after_cursor: str | None = None
    from_end: bool = False
    cursor: str | None = None  # the last record's: what the agent saves
    lost: int = 0  # journald does not say what it dropped: always 0
    wrapped: int = 0
    malformed: int = 0
    restarts: int = 0
    _proc: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _buffer: bytes = field(default=b"", init=False, repr=False)
    _skipping: bool = field(default=False, init=False, repr=False)
    _next_start: float = field(default=0.0, init=False, repr=False)

    @property
    def last_seq(self) -> str | None:
        return self.cursor

    def argv(self) -> list[str]:
        where = [f"--after-cursor={self.cursor}"] if self.cursor else ["--lines=0"] if self.from_end else []
        return [self.journalctl, "--dmesg", "--output=json", "--follow", "--no-pager", *where]

    def open(self) -> None:
        """Start journalctl after the saved cursor (OSError when it cannot be started)."""
        self.close()
        self.cursor = self.cursor or self.after_cursor
        self._proc = subprocess.Popen(self.argv(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                      stdin=subprocess.DEVNULL, start_new_session=True)
        assert self._proc.stdout is not None
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._buffer, self._skipping = b"", False

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if proc.stdout is not None:
            proc.stdout.close()

    def wait(self, timeout_s: float, wake: threading.Event | None = None) -> None:
        """Until journalctl wrote something (or the timeout; with no journalctl running, or `wake` set)."""
        if self._proc is not None and self._proc.stdout is not None and self._proc.poll() is None:
            readable(self._proc.stdout.fileno(), timeout_s)  # poll: any descriptor number, unlike select
        elif wake is not None:
            wake.wait(timeout_s)
        else:
            time.sleep(timeout_s)

    def read(self, limit: int = 1000) -> list[KmsgRecord]:
        """The new records available now (at most about `limit`), in order; a journalctl that ended is started
        again after the cursor (at most every `RESTART_S`)."""
        out: list[KmsgRecord] = []
        proc = self._proc
        if proc is None or proc.stdout is None:
            self._restart()
            return out
        fd = proc.stdout.fileno()
        while len(out) < limit:
            try:
                chunk = os.read(fd, 1 << 16)
            except BlockingIOError:
                return out
            if not chunk:
                break
            out += self._lines(chunk)
        else:
            return out
        log.warning("journalctl ended (exit %s): starting it again after cursor %s", proc.wait(), self.cursor)
        self.close()
        self._next_start = time.monotonic() + RESTART_S
        return out

    def _restart(self) -> None:
        if time.monotonic() < self._next_start:
            return
        self._next_start = time.monotonic() + RESTART_S
        try:
            self.open()
            self.restarts += 1
        except OSError as exc:
            log.warning("journalctl cannot be started again (%s)", exc)

    def _lines(self, chunk: bytes) -> list[KmsgRecord]:
        out: list[KmsgRecord] = []
        *lines, rest = (self._buffer + chunk).split(b"\n")
        for line in lines:
            if self._skipping:  # the end of a line too long to take
                self._skipping = False
                continue
            got = parse_entry(line) if line.strip() and len(line) <= MAX_LINE else None
            if got is None:
                self.malformed += bool(line.strip())
                continue
            self.cursor, record = got
            out.append(record)
        if len(rest) > MAX_LINE:
            self.malformed += not self._skipping
            self._skipping, rest = True, b""
        self._buffer = rest
        return out
