"""Append-only, size-rotated JSON-lines spool written by a daemon thread.

The training thread only calls `put()`: an O(1) append to a bounded deque that never
blocks and never raises. A daemon thread wakes every `flush_interval_s` (or on
`flush()` / `close()`), renders the queued items to dicts, and appends them to

    <directory>/<stem>.<seq>.jsonl        seq = 000000, 000001, ... (6+ digits)

Files are never renamed. A process starts a new file at ``max(existing seq) + 1``;
when the next write would take the current file past `max_bytes`, the writer moves
on to ``seq + 1`` and deletes the oldest files of the same stem beyond `keep_files`.
Only the highest seq is ever appended to; every lower one is complete. Each write is
a whole number of lines ending in ``\\n``, issued with `os.write` on an ``O_APPEND`` fd;
if a write fails part-way (disk full) the file is truncated back to its last complete
line. Readers should still consume only through the last ``\\n`` they see.

Failures (unwritable directory, disk full, a full queue because the disk is slow, a
record that does not serialise) drop records: they are counted, warned about once, and
the count is reported in the `dropped` field of the next record that is written.
After a write error the writer retries the file after `retry_s`.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

T = TypeVar("T")
_os_write = os.write  # module-level so tests can simulate a full disk
log = logging.getLogger("vigil.timer.spool")


class SpoolWriter(Generic[T]):
    """Renders queued items with `render` and appends them as JSON lines off-thread."""

    def __init__(
        self,
        directory: Path,
        stem: str,
        render: Callable[[T], dict[str, Any]],
        *,
        max_bytes: int = 16 << 20,
        keep_files: int | None = 8,
        queue_size: int = 4096,
        flush_interval_s: float = 0.5,
        retry_s: float = 5.0,
        exit_timeout_s: float = 2.0,
        idle_hook: Callable[[], None] | None = None,
    ) -> None:
        if max_bytes < 1 or queue_size < 1 or (keep_files is not None and keep_files < 1):
            raise ValueError("max_bytes, queue_size and keep_files must be >= 1")
        self.directory, self.stem = Path(directory), stem
        self._render, self._idle_hook = render, idle_hook
        self._max_bytes, self._keep, self._qmax = max_bytes, keep_files, queue_size
        self._interval, self._retry_s, self._exit_timeout = flush_interval_s, retry_s, exit_timeout_s
        self._q: deque[T] = deque()
        self._drop_lock = threading.Lock()
        self._dropped_hot = 0  # guarded by _drop_lock (put may run on two threads)
        self._dropped_write = 0  # writer thread only
        self._reported = 0
        self._warned: set[str] = set()
        self._fd: int | None = None
        self._seq = -1
        self._size = 0
        self._retry_at = 0.0
        self._tokens: list[threading.Event] = []
        self._tokens_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = False
        self.closed = False
        self.written = 0
        self._thread = threading.Thread(target=self._run, name="vigil-timer-spool", daemon=True)
        self._thread.start()
        atexit.register(self._atexit)

    # ---- training-thread side -------------------------------------------------------
    def put(self, item: T) -> bool:
        """Queue one item; False (and counted) when it had to be dropped. Never blocks."""
        if self.closed or len(self._q) >= self._qmax:
            self.count_dropped(1)
            return False
        self._q.append(item)
        return True

    def count_dropped(self, n: int) -> None:
        """Count records lost before reaching the queue (reported with the next record)."""
        with self._drop_lock:
            self._dropped_hot += n

    @property
    def dropped(self) -> int:
        """Records dropped so far, for any reason."""
        return self._dropped_hot + self._dropped_write

    @property
    def current_path(self) -> Path | None:
        return self._path(self._seq) if self._seq >= 0 else None

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until everything queued before this call was written or dropped."""
        if self.closed or not self._thread.is_alive():
            return not self._q
        token = threading.Event()
        with self._tokens_lock:
            self._tokens.append(token)
        self._wake.set()
        return token.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (bounded wait), then stop the thread. Idempotent."""
        if self.closed:
            return
        self._stopping = True
        self._wake.set()
        self._thread.join(timeout)
        self.closed = True
        atexit.unregister(self._atexit)

    def _atexit(self) -> None:
        self.close(self._exit_timeout)

    # ---- writer thread ----------------------------------------------------------------
    def _warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        log.warning("%s", message)
        warnings.warn(message, RuntimeWarning, stacklevel=2)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            stopping = self._stopping
            with self._tokens_lock:
                tokens, self._tokens = self._tokens, []
            try:
                if self._idle_hook is not None:
                    self._idle_hook()
                self._drain()
            except Exception as exc:  # never let the thread die silently
                self._warn_once("internal", f"timer: spool writer error: {exc!r}")
            for token in tokens:
                token.set()
            if stopping:
                break
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _drain(self) -> None:
        records: list[dict[str, Any]] = []
        while self._q:
            item = self._q.popleft()
            try:
                records.append(self._render(item))
            except Exception as exc:
                self._dropped_write += 1
                self._warn_once("render", f"timer: dropping a record that failed to render: {exc!r}")
        if not records:
            return
        if time.monotonic() < self._retry_at:
            self._dropped_write += len(records)
            return
        unreported = self.dropped - self._reported
        records[0]["dropped"] = unreported
        done: list[int] = [0]  # lines written, even when a later chunk fails
        try:
            lines = [self._encode(r) for r in records]
            self._write_lines(lines, done)
        except (OSError, ValueError, TypeError) as exc:
            self._dropped_write += len(records) - done[0]
            self.written += done[0]
            if done[0]:
                self._reported += unreported  # the first record, which carries it, was written
            self._retry_at = time.monotonic() + self._retry_s
            self._close_fd()
            self._warn_once(
                "write", f"timer: cannot write step records under {self.directory} ({exc}); dropping them"
            )
            return
        self._reported += unreported
        self.written += len(records)

    @staticmethod
    def _encode(record: dict[str, Any]) -> bytes:
        record.setdefault("event_id", uuid.uuid4().hex)
        return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()

    def _path(self, seq: int) -> Path:
        return self.directory / f"{self.stem}.{seq:06d}.jsonl"

    def _existing(self) -> list[tuple[int, Path]]:
        found: list[tuple[int, Path]] = []
        for path in self.directory.glob(f"{self.stem}.*.jsonl"):
            middle = path.name[len(self.stem) + 1 : -len(".jsonl")]
            if middle.isdigit():
                found.append((int(middle), path))
        return sorted(found)

    def _open(self, seq: int) -> None:
        self._fd = os.open(self._path(seq), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._seq = seq
        self._size = os.fstat(self._fd).st_size

    def _close_fd(self) -> None:
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _start_file(self, seq: int) -> None:
        self._close_fd()
        self._open(seq)
        if self._keep is not None:
            files = self._existing()
            for _, path in files[: max(0, len(files) - self._keep)]:
                try:
                    path.unlink()
                except OSError:
                    pass

    def _write_lines(self, lines: list[bytes], done: list[int]) -> None:
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            existing = self._existing()
            # a fresh file per process (and after an error): earlier files stay complete
            self._start_file(max(self._seq + 1, existing[-1][0] + 1 if existing else 0))
        chunk: list[bytes] = []
        size = self._size
        for line in lines:
            if size > 0 and size + len(line) > self._max_bytes:
                self._write_all(b"".join(chunk))
                done[0] += len(chunk)
                chunk, size = [], 0
                self._start_file(self._seq + 1)
            chunk.append(line)
            size += len(line)
        self._write_all(b"".join(chunk))
        done[0] += len(chunk)

    def _write_all(self, data: bytes) -> None:
        if not data or self._fd is None:
            return
        view, done = memoryview(data), 0
        try:
            while done < len(data):
                done += _os_write(self._fd, view[done:])
        except OSError:
            try:
                os.ftruncate(self._fd, self._size)  # drop the torn line
            except OSError:
                pass
            raise
        self._size += len(data)
