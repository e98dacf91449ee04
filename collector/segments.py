"""Append-only numbered segment files: the node agent's one rotating writer.

Files are `<directory>/<stem><n:09d><suffix>` (`seg-000000007.jsonl`, `stdout.000000002.log`).
`append` writes whole records with O_APPEND writes on the open active file; a write that
fails part-way is truncated back, so no segment ever ends in half a record. A segment
that would grow past `segment_bytes` is closed and the next one started; a writer built
over a directory that already has segments continues after the highest number, so a
restarted agent never appends to a file a reader may be half-way through. `keep` bounds
the number of segments (the oldest go first); callers with their own bound (the outbox
counts what it drops) delete through `delete`.

Errors are `OSError`s for the caller to decide on: the outbox falls back to memory,
output capture counts and goes on. The timer's spool (`vigil.trainside.spool`) is the same
idea inside the training process, which imports nothing of the agent.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(kw_only=True)
class SegmentWriter:
    directory: Path
    stem: str
    suffix: str
    segment_bytes: int
    keep: int | None = None
    _fd: int = field(default=-1, init=False, repr=False)
    _active: int = field(default=-1, init=False)
    _size: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        self._pattern = re.compile(rf"^{re.escape(self.stem)}(\d{{9,}}){re.escape(self.suffix)}$")

    @property
    def active(self) -> int:
        """The segment the next append goes to (it may not exist yet)."""
        if self._active < 0:
            self._active = max(self.segments(), default=0) + 1
        return self._active

    def start_after(self, n: int) -> None:
        """Make the next append start a segment numbered above `n` and above every one on disk."""
        self.close()
        self._active, self._size = max([n, *self.segments()]) + 1, 0

    def path(self, n: int) -> Path:
        return self.directory / f"{self.stem}{n:09d}{self.suffix}"

    def segments(self) -> list[int]:
        """Segment numbers on disk, oldest first."""
        try:
            names = os.listdir(self.directory)
        except OSError:
            return []
        return sorted(int(m[1]) for name in names if (m := self._pattern.match(name)))

    def size(self, n: int) -> int:
        try:
            return self.path(n).stat().st_size
        except OSError:
            return 0

    def append(self, data: bytes) -> int:
        """Append `data` whole to the active segment; its number. OSError when the disk refuses."""
        if self._size and self._size + len(data) > self.segment_bytes:
            self.roll()
        n = self.active
        if self._fd < 0:
            self.directory.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(self.path(n), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            self._size = os.fstat(self._fd).st_size
        before = self._size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view):]
        except OSError:
            try:
                os.ftruncate(self._fd, before)  # never leave half a record behind
            finally:
                self.roll()
            raise
        self._size = before + len(data)
        return n

    def roll(self) -> None:
        """Close the active segment; the next append starts a new one."""
        self.close()
        self._active, self._size = self.active + 1, 0
        if self.keep is not None:
            for n in self.segments()[:-self.keep] if self.keep > 0 else self.segments():
                self.delete(n)

    def delete(self, n: int) -> None:
        if n == self._active:
            self.close()
        self.path(n).unlink(missing_ok=True)

    def close(self) -> None:
        if self._fd >= 0:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = -1
