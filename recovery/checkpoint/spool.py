"""A small, bounded, never-raising JSON-lines appender for checkpoint events.

The node agent ships every ``*.jsonl`` line under the spool directory. Checkpoint events
are rare (a few per save), so this is deliberately simpler than the step timer's spool:

    <directory>/<stem>.ckpt-<seq>.jsonl        seq = 000000, 000001, ...

The ``.ckpt-`` infix keeps these files apart from the timer's ``<stem>.<seq>.jsonl``
(whose sequence part is all digits), so neither rotation ever touches the other's files.

* `put` appends to a bounded deque and wakes the writer thread: O(1), never blocks,
  never raises; a full queue drops the record and counts it.
* The writer thread opens a new file per process at ``max(existing seq) + 1``, moves on
  to the next seq when a file would pass `max_bytes`, and deletes the oldest files of
  its stem beyond `keep_files`. Each record is one whole line, written with `os.write`
  on an ``O_APPEND`` fd; a write that fails part-way is truncated back to the last line.
* Write errors (unwritable directory, full disk) drop the record, count it, and close the
  file; the next record retries. `dropped` is also reported in the next line written.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from collections import deque
from pathlib import Path
from typing import Any

log = logging.getLogger("vigil.recovery.checkpoint")
INFIX = ".ckpt-"


class EventSpool:
    def __init__(
        self,
        directory: Path,
        stem: str,
        *,
        max_bytes: int = 1 << 20,
        keep_files: int = 4,
        queue_size: int = 1024,
    ) -> None:
        self.directory, self.stem = Path(directory), stem
        self._max_bytes, self._keep, self._qmax = max_bytes, keep_files, queue_size
        self._q: deque[dict[str, Any]] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)
        self._pending = 0  # queued or being written; guarded by _lock
        self._stop = False
        self._fd: int | None = None
        self._seq = -1
        self._size = 0
        self._reported = 0
        self.dropped = 0
        self.written = 0
        self._warned = False
        self._thread: threading.Thread | None = None

    # ---- any thread ------------------------------------------------------------------------
    def put(self, record: dict[str, Any]) -> bool:
        """Queue one record; False (counted in `dropped`) when it had to be dropped."""
        with self._lock:
            if self._stop or len(self._q) >= self._qmax:
                self.dropped += 1
                return False
            self._q.append(record)
            self._pending += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="vigil-ckpt-events", daemon=True)
                self._thread.start()
                atexit.register(self.close, 2.0)
            self._wake.notify()
        return True

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until every queued record was written or dropped."""
        with self._lock:
            return self._wake.wait_for(lambda: self._pending == 0, timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (bounded wait) and stop the thread. Idempotent."""
        self.flush(timeout)
        with self._lock:
            self._stop = True
            self._wake.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        atexit.unregister(self.close)

    # ---- writer thread ---------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            with self._lock:
                self._wake.wait_for(lambda: self._q or self._stop)
                if not self._q:
                    break
                record = self._q.popleft()
            try:
                self._write(record)
            except Exception as exc:  # never let the thread die: count and go on
                with self._lock:
                    self.dropped += 1
                self._close_fd()
                self._warn(f"checkpoint events: cannot write under {self.directory} ({exc}); dropping them")
            with self._lock:
                self._pending -= 1
                self._wake.notify_all()
        self._close_fd()

    def _warn(self, message: str) -> None:
        if not self._warned:
            self._warned = True
            log.warning("%s", message)

    def _write(self, record: dict[str, Any]) -> None:
        record["dropped"] = self.dropped - self._reported
        line = (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._start_file(max(self._seq + 1, self._max_seq() + 1))
        elif self._size > 0 and self._size + len(line) > self._max_bytes:
            self._start_file(self._seq + 1)
        assert self._fd is not None
        try:
            view = memoryview(line)
            while view:
                view = view[os.write(self._fd, view) :]
        except OSError:
            try:
                os.ftruncate(self._fd, self._size)  # drop the torn line
            except OSError:
                pass
            raise
        self._size += len(line)
        self._reported += record["dropped"]
        self.written += 1

    def _files(self) -> list[tuple[int, Path]]:
        found = []
        for path in self.directory.glob(f"{self.stem}{INFIX}*.jsonl"):
            seq = path.name[len(self.stem) + len(INFIX) : -len(".jsonl")]
            if seq.isdigit():
                found.append((int(seq), path))
        return sorted(found)

    def _max_seq(self) -> int:
        files = self._files()
        return files[-1][0] if files else -1

    def _start_file(self, seq: int) -> None:
        self._close_fd()
        path = self.directory / f"{self.stem}{INFIX}{seq:06d}.jsonl"
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._seq, self._size = seq, os.fstat(self._fd).st_size
        files = self._files()
        for _, old in files[: max(0, len(files) - self._keep)]:
            try:
                old.unlink()
            except OSError:
                pass

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None
