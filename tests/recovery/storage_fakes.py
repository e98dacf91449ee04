"""Instrumented torch.distributed.checkpoint storage for the checkpoint tests.

* `GatedWriter`: a FileSystemWriter whose file streams call a hook after every write;
  the hooks here block on a gate (slow storage, a writer stuck mid-persist) or raise
  ENOSPC after a byte budget (a disk that fills up under one rank).
* `CountingReader`: a FileSystemReader that counts its metadata reads, data reads and
  the bytes of the shards it reads, into a shared `ReadCount`.
"""

from __future__ import annotations

import errno
import io
import os
import threading
from collections.abc import Callable, Generator, Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader, FileSystemWriter

Hook = Callable[[io.IOBase, int], None]  # (underlying stream, bytes written so far in this file)


class _HookedStream(io.RawIOBase):
    def __init__(self, raw: Any, hook: Hook) -> None:
        self._raw, self._hook, self._written = raw, hook, 0

    def write(self, b: Any) -> int:
        n = int(self._raw.write(b))
        self._written += n
        self._hook(self._raw, self._written)
        return n

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return int(self._raw.tell())

    def seekable(self) -> bool:
        return bool(self._raw.seekable())

    def seek(self, offset: int, whence: int = 0) -> int:
        return int(self._raw.seek(offset, whence))

    def fileno(self) -> int:
        return int(self._raw.fileno())

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        if self.closed:
            return
        try:
            super().close()  # flushes (through self.flush) while the file is still open
        finally:
            self._raw.close()


class _HookedFileSystem(FileSystem):
    def __init__(self, hook: Hook) -> None:
        self._hook = hook

    @contextmanager
    def create_stream(self, path: str | os.PathLike[str], mode: str) -> Generator[io.IOBase, None, None]:
        with super().create_stream(path, mode) as raw:
            yield _HookedStream(raw, self._hook) if "w" in mode else raw


def gated_writer(path: str, hook: Hook, **kwargs: Any) -> FileSystemWriter:
    writer = FileSystemWriter(path, **kwargs)
    writer.fs = _HookedFileSystem(hook)
    return writer


def block_until(gate: threading.Event, *, entered: Callable[[], None] = lambda: None) -> Hook:
    """A hook that, once data reached the file, reports `entered` and waits for `gate`."""

    def hook(raw: io.IOBase, written: int) -> None:
        raw.flush()
        os.fsync(raw.fileno())
        entered()
        gate.wait()

    return hook


def touch_then_block_forever(marker: Path) -> Hook:
    """A writer stuck mid-persist: some bytes are on disk, `marker` says so, then it hangs."""
    return block_until(threading.Event(), entered=lambda: marker.touch())


def disk_full_after(budget: int) -> Hook:
    def hook(raw: io.IOBase, written: int) -> None:
        if written > budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    return hook


@dataclass
class ReadCount:
    readers: int = 0  # storage readers built (one per checkpoint opened)
    metadata: int = 0
    data_calls: int = 0
    items: int = 0
    bytes: int = 0

    @property
    def any(self) -> bool:
        return self.readers + self.metadata + self.data_calls > 0


class CountingReader(FileSystemReader):
    def __init__(self, path: str, count: ReadCount) -> None:
        super().__init__(path)
        self.count = count
        count.readers += 1

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        self.count.metadata += 1
        return super().read_metadata(*args, **kwargs)

    def read_data(self, plan: Any, planner: Any) -> Any:
        items: Iterable[Any] = plan.items
        self.count.data_calls += 1
        for item in items:
            self.count.items += 1
            self.count.bytes += int(self.storage_data[item.storage_index].length)
        return super().read_data(plan, planner)
