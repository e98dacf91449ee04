"""The training side's one spool: records queued by any thread, written as JSON lines by a daemon thread.

Both the step timer (one record per step, batched every `flush_interval_s`) and the checkpointer (a few events per
save, `flush_interval_s=0`: each written at once) write through it, to the files `spoolfile` lays out. Guarantees:

* `put` is O(1), lock-free and never blocks nor raises: a bounded queue (at most `queue_size` records, plus one per
  other thread putting at the same instant); a record that does not fit, or comes after `close`, is dropped and
  counted. `count_dropped` adds records the caller lost itself.
* Rendering (`render`, e.g. a step to its dict), ``event_id`` generation and every byte of I/O happen on the writer
  thread, started by the first `put` (a spool never used costs no thread), or at once when it has an `idle_hook`
  to call every `flush_interval_s` (the timer's poll of finished CUDA steps).
* Nothing that goes wrong reaches the caller: a record that does not render or serialise, an unwritable directory,
  a full disk drop records, counted, warned about once per cause; after a write error the writer closes its file
  and drops what comes for `retry_s`, then starts a fresh file. `dropped` counts every loss, and the first record
  of each write carries in its ``dropped`` field the losses not yet reported (0 in the others).
* `flush` and `close` wait at most their timeout; `close` writes what is queued first and also runs at exit.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from vigil.trainside.spoolfile import SpoolFile

T = TypeVar("T")
log = logging.getLogger("vigil.trainside.spool")


class SpoolWriter(Generic[T]):
    """Renders queued items with `render` and appends them as JSON lines off-thread (see the module docstring)."""

    def __init__(
        self, directory: Path, stem: str, render: Callable[[T], dict[str, Any]], *, stream: str = "",
        name: str = "timer", what: str = "step records", max_bytes: int = 16 << 20, keep_files: int | None = 8,
        queue_size: int = 4096, flush_interval_s: float = 0.5, retry_s: float = 5.0, exit_timeout_s: float = 2.0,
        idle_hook: Callable[[], None] | None = None,
    ) -> None:  # fmt: skip
        if max_bytes < 1 or queue_size < 1 or (keep_files is not None and keep_files < 1) or flush_interval_s < 0:
            raise ValueError("max_bytes, queue_size and keep_files must be >= 1, flush_interval_s >= 0")
        self.directory, self.stem, self.name, self.what = Path(directory), stem, name, what
        self._file = SpoolFile(self.directory, stem, stream, max_bytes=max_bytes, keep_files=keep_files)
        self._render, self._idle_hook, self._qmax = render, idle_hook, queue_size
        self._interval, self._retry_s, self._exit_timeout = flush_interval_s or None, retry_s, exit_timeout_s
        self._q: deque[T] = deque()
        self._lock = threading.Lock()  # guards _dropped_hot, _stopping, the thread's start and _tokens
        self._dropped_hot = 0
        self._dropped_write = 0  # writer thread only
        self._reported = 0
        self._warned: set[str] = set()
        self._retry_at = 0.0
        self._tokens: list[threading.Event] = []
        self._wake = threading.Event()
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._kick = True
        self.closed = False
        self.written = 0
        if idle_hook is not None:  # it runs every flush interval, records or not
            self._start()

    # ---- any thread -------------------------------------------------------------------------
    def put(self, item: T) -> bool:
        """Queue one item; False (and counted) when it had to be dropped. Never blocks, never raises."""
        if self._stopping or len(self._q) >= self._qmax:  # no lock on this path: deque ops are atomic
            self.count_dropped(1)
            return False
        self._q.append(item)
        if self._kick:  # the thread is not started yet, or each record is written at once
            self._kick_writer()
        return True

    def _kick_writer(self) -> None:
        if self._thread is None:
            with self._lock:
                if self._thread is None and not self._stopping:
                    self._start()
        if self._interval is None:
            self._wake.set()

    def count_dropped(self, n: int) -> None:
        """Count records lost before reaching the queue (reported with the next record written)."""
        with self._lock:
            self._dropped_hot += n

    @property
    def dropped(self) -> int:
        """Records dropped so far, for any reason (once closed, whatever a racing `put` left queued too)."""
        left = len(self._q) if self.closed and (self._thread is None or not self._thread.is_alive()) else 0
        return self._dropped_hot + self._dropped_write + left

    @property
    def current_path(self) -> Path | None:
        return self._file.path(self._file.seq) if self._file.seq >= 0 else None

    def flush(self, timeout: float = 5.0) -> bool:
        """Wait (bounded) until everything queued before this call was written or dropped."""
        with self._lock:
            thread = self._thread
            if thread is None or not thread.is_alive():
                return not self._q
            token = threading.Event()
            self._tokens.append(token)
        self._wake.set()
        return token.wait(timeout)

    def close(self, timeout: float = 5.0) -> None:
        """Write what is queued (bounded wait), then stop the thread; later puts are dropped. Idempotent."""
        with self._lock:
            if self.closed:
                return
            self._stopping, thread = True, self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self.closed = True
        atexit.unregister(self._atexit)

    def _start(self) -> None:
        self._kick = self._interval is None
        self._thread = threading.Thread(target=self._run, name=f"vigil-{self.name}-spool", daemon=True)
        self._thread.start()
        atexit.register(self._atexit)

    def _atexit(self) -> None:
        self.close(self._exit_timeout)

    # ---- writer thread ------------------------------------------------------------------------
    def _warn_once(self, key: str, message: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s", message)
            warnings.warn(message, RuntimeWarning, stacklevel=2)

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            with self._lock:
                stopping, tokens, self._tokens = self._stopping, self._tokens, []
            try:
                if self._idle_hook is not None:
                    self._idle_hook()
                self._drain()
            except Exception as exc:  # never let the thread die silently
                self._warn_once("internal", f"{self.name}: spool writer error: {exc!r}")
            for token in tokens:
                token.set()
            if stopping:
                break
        self._file.close()

    def _drain(self) -> None:
        records: list[dict[str, Any]] = []
        while self._q:
            item = self._q.popleft()
            try:
                records.append(self._render(item))
            except Exception as exc:
                self._dropped_write += 1
                self._warn_once("render", f"{self.name}: dropping a record that failed to render: {exc!r}")
        if not records:
            return
        if time.monotonic() < self._retry_at:
            self._dropped_write += len(records)
            return
        unreported = self.dropped - self._reported
        lines: list[bytes] = []
        for record in records:  # one record that does not serialise costs only itself
            try:
                lines.append(_encode(record, 0 if lines else unreported))
            except (ValueError, TypeError) as exc:
                self._dropped_write += 1
                self._warn_once("encode", f"{self.name}: dropping a record that is not JSON: {exc!r}")
        if not lines:
            return
        done: list[int] = [0]  # lines written, even when a later chunk fails
        try:
            self._file.write_lines(lines, done)
        except OSError as exc:
            self._dropped_write += len(lines) - done[0]
            self.written += done[0]
            if done[0]:
                self._reported += unreported  # the first record, which carries it, was written
            self._retry_at = time.monotonic() + self._retry_s
            self._file.close()
            self._warn_once("write", f"{self.name}: cannot write {self.what} under {self.directory} ({exc}); "
                                     "dropping them")  # fmt: skip
            return
        self._reported += unreported
        self.written += len(lines)


def _encode(record: dict[str, Any], dropped: int) -> bytes:
    record["dropped"] = dropped
    record.setdefault("event_id", uuid.uuid4().hex)
    return (json.dumps(record, separators=(",", ":"), allow_nan=False) + "\n").encode()
