"""The spool's files: where one rank's stream of JSON lines goes, how it rotates, and what a failed write leaves.

    <spool>/<job>/<host>-rank<rank>.<seq>.jsonl              the step timer's stream (no stream name)
    <spool>/<job>/<host>-rank<rank>.<stream>-<seq>.jsonl     another stream, e.g. ``ckpt`` (the checkpointer's)

seq = 000000, 000001, ... (6+ digits). The node agent ships every ``*.jsonl`` under the spool directory, so these
names are a contract with it: they stay byte-for-byte what earlier releases wrote. A stream only ever lists, rotates
and deletes its own files: the timer's sequence part is all digits, another stream's starts with its name.

Files are never renamed. A writer starts a new file at ``max(existing seq) + 1`` (a fresh file per process and after
an error, so every earlier file is complete); when the next line would take the file past `max_bytes` it moves on
to ``seq + 1`` and deletes the oldest files of its stream beyond `keep_files`. Each write is whole lines ending in
``\\n``, issued with `os.write` on an ``O_APPEND`` fd; a write that fails part-way (disk full) is truncated back to
the last complete line. Readers should still consume only through the last ``\\n`` they see. Writer thread only.
"""

from __future__ import annotations

import os
from pathlib import Path

from vigil.trainside.identity import Identity, safe_name

_os_write = os.write  # module-level so tests can simulate a full disk


def location(spool_dir: Path, identity: Identity) -> tuple[Path, str]:
    """(directory, stem) of one rank's files: ``<spool_dir>/<job>``, ``<host>-rank<rank>``."""
    return spool_dir / safe_name(identity.job_id), f"{safe_name(identity.host)}-rank{identity.rank}"


class SpoolFile:
    """Appends whole lines to the newest file of one stream, rotating by size."""

    def __init__(self, directory: Path, stem: str, stream: str, *, max_bytes: int, keep_files: int | None) -> None:
        self.directory, self.stem = directory, stem
        self._prefix = f"{stem}.{stream}-" if stream else f"{stem}."
        self._max_bytes, self._keep = max_bytes, keep_files
        self._fd: int | None = None
        self.seq = -1
        self._size = 0

    def path(self, seq: int) -> Path:
        return self.directory / f"{self._prefix}{seq:06d}.jsonl"

    def existing(self) -> list[tuple[int, Path]]:
        """This stream's files, oldest first."""
        found: list[tuple[int, Path]] = []
        for path in self.directory.glob(f"{self._prefix}*.jsonl"):
            middle = path.name[len(self._prefix) : -len(".jsonl")]
            if middle.isdigit():
                found.append((int(middle), path))
        return sorted(found)

    def write_lines(self, lines: list[bytes], done: list[int]) -> None:
        """Append `lines`, rotating as needed; `done[0]` counts the lines on disk, even when a later write fails."""
        if self._fd is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            existing = self.existing()
            self._start(max(self.seq + 1, existing[-1][0] + 1 if existing else 0))
        chunk: list[bytes] = []
        size = self._size
        for line in lines:
            if size > 0 and size + len(line) > self._max_bytes:
                self._write_all(b"".join(chunk))
                done[0] += len(chunk)
                chunk, size = [], 0
                self._start(self.seq + 1)
            chunk.append(line)
            size += len(line)
        self._write_all(b"".join(chunk))
        done[0] += len(chunk)

    def close(self) -> None:
        """Close the file; the next write starts a fresh one."""
        if self._fd is not None:
            try:
                os.close(self._fd)
            except OSError:
                pass
            self._fd = None

    def _start(self, seq: int) -> None:
        self.close()
        self._fd = os.open(self.path(seq), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.seq = seq
        self._size = os.fstat(self._fd).st_size
        if self._keep is not None:
            files = self.existing()
            for _, path in files[: max(0, len(files) - self._keep)]:
                try:
                    path.unlink()
                except OSError:
                    pass

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
