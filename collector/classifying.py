"""Classification off the thread that reads a child's pipe: a bounded queue, drop and count when full.

The thread reading a training process's stdout/stderr must never wait on anything slow,
or the training process blocks on its own writes. `LineClassifier.offer` only enqueues
(the line and its arrival time); one thread per stream feeds the queued lines to the
stream's `LogStream` and emits the events. When the queue is full (classification
fell behind), the line is dropped from classification and counted in `dropped`; it was
still echoed and written to the output files by the reader. `close` lets the queue
drain (up to a timeout) and stops the thread.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from vigil.collector.logstream import LogStream
from vigil.contract import LogLine, utcnow

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class LineClassifier:
    stream: LogStream
    emit: Callable[[Sequence[LogLine]], None]
    name: str = "stream"
    max_lines: int = 10_000
    dropped: int = 0
    _queue: queue.Queue[tuple[bytes, datetime] | None] = field(init=False, repr=False)
    _thread: threading.Thread = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self._queue = queue.Queue(maxsize=self.max_lines)
        self._thread = threading.Thread(target=self._run, name=f"vigil-classify-{self.name}", daemon=True)
        self._thread.start()

    def offer(self, raw: bytes) -> None:
        """Queue one line for classification; never blocks (a full queue drops it and counts)."""
        try:
            self._queue.put_nowait((raw, utcnow()))
        except queue.Full:
            self.dropped += 1
            if self.dropped == 1 or self.dropped % 1000 == 0:
                log.warning("classification of %s fell behind: %d lines not classified", self.name, self.dropped)

    def close(self, timeout_s: float = 10.0) -> None:
        """Classify what is queued (up to `timeout_s`), then stop the thread."""
        try:
            self._queue.put(None, timeout=timeout_s)  # the end
        except queue.Full:
            log.warning("classification of %s: queue still full at close", self.name)
            return
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            raw, at = item
            try:
                self.emit(self.stream.feed(raw, at=at))
            except Exception:
                log.exception("classifying a %s line failed", self.name)
