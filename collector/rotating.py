"""Size-rotated output files: `<name>.log`, then `<name>.log.1` ... `<name>.log.<keep>`.

Writes are buffered and flushed by `flush()` (the agent calls it about once a second)
and on close. A write error (disk full, directory removed) never reaches the caller:
it is counted, and the file is reopened on the next write.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

log = logging.getLogger(__name__)


@dataclass(kw_only=True)
class RotatingFile:
    path: Path
    max_bytes: int
    keep: int = 3
    errors: int = 0
    _fh: BinaryIO | None = field(default=None, init=False, repr=False)
    _size: int = field(default=0, init=False)

    def write(self, data: bytes) -> None:
        try:
            if self._fh is None:
                self._open()
            elif self._size + len(data) > self.max_bytes and self._size > 0:
                self._rotate()
            assert self._fh is not None
            self._fh.write(data)
            self._size += len(data)
        except OSError as exc:
            self._failed(exc)

    def flush(self) -> None:
        if self._fh is not None:
            try:
                self._fh.flush()
            except OSError as exc:
                self._failed(exc)

    def close(self) -> None:
        self.flush()
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
            self._fh = None

    def _open(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "ab")  # noqa: SIM115
        self._size = self._fh.tell()

    def _rotate(self) -> None:
        self.close()
        if self.keep <= 0:
            self.path.unlink(missing_ok=True)
        else:
            for i in range(self.keep - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{i}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
            if self.path.exists():
                self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._open()

    def _failed(self, exc: OSError) -> None:
        self.errors += 1
        if self.errors == 1 or self.errors % 1000 == 0:
            log.warning("output file %s: write failed (%s); %d failures so far", self.path, exc, self.errors)
        if self._fh is not None:
            try:
                self._fh.close()
            except OSError:
                pass
        self._fh = None
