"""The durable local queue of the agent's own events (heartbeats, NIC, logs, exits, traces).

Every event is appended to disk before it is shipped, so a broker outage or an agent
restart (even SIGKILL) loses nothing: segments `seg-<n>.jsonl` of one JSON event per
line, one cursor (segment, offset) committed after delivery and persisted by the
shipper. A restarted agent starts a new segment and ships the old ones first.

Bounded: beyond `max_bytes` the oldest segments are deleted and their unshipped events
counted in `dropped`. When the disk refuses a write (full, unwritable) events go to a
bounded memory buffer instead, shipped the same way but not durable; overflowing it
drops the oldest, counted too. Nothing here raises on I/O trouble.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vigil.collector.segments import SegmentWriter
from vigil.contract import Event

log = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class OutboxBatch:
    lines: list[bytes]
    memory: list[Event]
    cursor: tuple[int, int]  # (segment, offset) after these lines
    memory_end: int = 0  # sequence number after the last memory event taken


@dataclass(kw_only=True)
class Outbox:
    directory: Path
    max_bytes: int = 256 << 20
    segment_bytes: int = 4 << 20
    memory_limit: int = 10_000
    retry_disk_s: float = 5.0
    dropped: int = 0
    write_errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _memory: deque[Event] = field(default_factory=deque, init=False, repr=False)
    _memory_first: int = field(default=0, init=False)  # sequence number of _memory[0]
    _cursor: tuple[int, int] = field(default=(0, 0), init=False)
    _read: tuple[int, int] = field(default=(0, 0), init=False)
    _disk_ok_after: float = field(default=0.0, init=False)
    _pending: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._segs = SegmentWriter(directory=self.directory, stem="seg-", suffix=".jsonl",
                                   segment_bytes=self.segment_bytes)

    def restore(self, cursor: Sequence[int] | None) -> None:
        """Resume from a persisted cursor (None: ship every segment found)."""
        with self._lock:
            segs = self._segs.segments()
            start = (int(cursor[0]), int(cursor[1])) if cursor else ((segs[0], 0) if segs else (0, 0))
            self._cursor = self._read = start
            self._segs.start_after(start[0])
            self._pending = sum(self._count_unshipped(n) for n in segs)

    # ---- writing (any thread) ----------------------------------------------------------------
    def append(self, events: Sequence[Event]) -> None:
        if not events:
            return
        data = "".join(e.model_dump_json() + "\n" for e in events).encode()
        with self._lock:
            if time.monotonic() >= self._disk_ok_after and self._write(data):
                self._pending += len(events)
                self._enforce_bound()
                return
            for e in events:
                if len(self._memory) >= self.memory_limit:
                    self._memory.popleft()
                    self._memory_first += 1
                    self.dropped += 1
                self._memory.append(e)

    def _write(self, data: bytes) -> bool:
        try:
            self._segs.append(data)  # whole lines only: a failed write is truncated back
            return True
        except OSError as exc:
            self.write_errors += 1
            self._disk_ok_after = time.monotonic() + self.retry_disk_s
            if self.write_errors == 1 or self.write_errors % 100 == 0:
                log.warning("outbox %s: cannot write (%s); buffering in memory (%d write errors)",
                            self.directory, exc, self.write_errors)
            return False

    def _enforce_bound(self) -> None:
        sizes = {n: self._segs.size(n) for n in self._segs.segments()}
        total = sum(sizes.values())
        for n in sorted(sizes):
            if total <= self.max_bytes or n == self._segs.active:
                break
            lost = self._count_unshipped(n)
            self.dropped += lost
            self._pending -= lost
            log.warning("outbox %s: over %d bytes, deleting %s (%d unshipped events)",
                        self.directory, self.max_bytes, self._segs.path(n).name, lost)
            self._segs.delete(n)
            total -= sizes[n]
            if self._cursor[0] <= n:
                self._cursor = self._read = (n + 1, 0)

    def _count_unshipped(self, n: int) -> int:
        if n < self._cursor[0]:
            return 0
        try:
            with open(self._segs.path(n), "rb") as fh:
                fh.seek(self._cursor[1] if n == self._cursor[0] else 0)
                return fh.read().count(b"\n")
        except OSError:
            return 0

    # ---- reading (the shipper's thread) ------------------------------------------------------
    def poll(self, max_events: int) -> OutboxBatch:
        with self._lock:
            memory = list(self._memory)[:max_events]
            lines: list[bytes] = []
            seg, off = self._read
            for n in [s for s in self._segs.segments() if s >= seg]:
                if len(lines) + len(memory) >= max_events:
                    break
                if n != seg:
                    seg, off = n, 0
                try:
                    with open(self._segs.path(n), "rb") as fh:
                        fh.seek(off)
                        data = fh.read(4 << 20)
                except OSError:
                    continue
                end = data.rfind(b"\n")
                if end < 0:
                    continue
                got = data[: end + 1].split(b"\n")[:-1][: max_events - len(lines) - len(memory)]
                lines += got
                off += sum(len(ln) + 1 for ln in got)
                if off < self._segs.size(n):
                    break  # more in this segment than this poll takes
            self._read = (seg, off)
            return OutboxBatch(lines=lines, memory=memory, cursor=(seg, off),
                               memory_end=self._memory_first + len(memory))

    def commit(self, batch: OutboxBatch) -> None:
        with self._lock:
            # by sequence, not count: events that overflowed since the poll are already gone
            while self._memory and self._memory_first < batch.memory_end:
                self._memory.popleft()
                self._memory_first += 1
            if batch.cursor > self._cursor:
                self._cursor = batch.cursor
                self._pending = max(0, self._pending - len(batch.lines))
            for n in self._segs.segments():
                if n < self._cursor[0] and n != self._segs.active:
                    self._segs.delete(n)

    def rewind(self) -> None:
        with self._lock:
            self._read = self._cursor

    def cursor(self) -> list[int]:
        with self._lock:
            return list(self._cursor)

    def backlog(self) -> int:
        """Events appended and not yet delivered (disk and memory)."""
        with self._lock:
            return self._pending + len(self._memory)

    def stats(self) -> dict[str, Any]:
        return {"dropped": self.dropped, "write_errors": self.write_errors, "memory": len(self._memory)}

    def close(self) -> None:
        with self._lock:
            self._segs.close()
