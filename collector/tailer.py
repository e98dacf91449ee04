"""Tailing line files with durable offsets: rotation-, rename- and truncation-safe.

Files matching `patterns` under `roots` (recursively) are identified by device+inode
plus a fingerprint of their first bytes (so a reused inode is a new file). A file
renamed keeps its offset; a file truncated starts over; only complete lines (ending in
"\\n") are read, a partial last line waits for its end. A line longer than `READ_CHUNK`
(4 MiB) can never be handed out whole: it is skipped up to its newline and counted
(`oversized_lines`), its bytes committed like shipped lines, so it never wedges the file. Two offsets per file: `read`
(handed out) and `committed` (confirmed by the caller, e.g. after delivery);
`rewind()` goes back to the committed ones, `state()` / the constructor persist them.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
HEAD_BYTES = 256
READ_CHUNK = 4 << 20


@dataclass(kw_only=True)
class TailedFile:
    key: str
    path: Path
    head: str = ""
    head_len: int = 0
    read: int = 0
    committed: int = 0
    size: int = 0
    skipping: int = -1  # offset where an over-long line starts: read past its newline, hand nothing out


@dataclass(frozen=True, kw_only=True)
class Chunk:
    file: TailedFile
    lines: list[bytes]
    end: int  # read offset after these lines


def _fingerprint(path: Path, length: int) -> str:
    with open(path, "rb") as fh:
        return hashlib.sha1(fh.read(length)).hexdigest()


@dataclass(kw_only=True)
class Tailer:
    roots: Sequence[Path]
    patterns: Sequence[str] = ("*.jsonl",)
    restored: list[dict[str, Any]] = field(default_factory=list)
    files: dict[str, TailedFile] = field(default_factory=dict)
    truncations: int = 0
    lost_bytes: int = 0
    oversized_lines: int = 0

    def scan(self) -> None:
        """Discover new files, follow renames, notice truncation and deletion."""
        seen: dict[str, tuple[Path, os.stat_result]] = {}
        for root in self.roots:
            if not root.is_dir():
                continue
            for pattern in self.patterns:
                for path in root.rglob(pattern):
                    try:
                        st = path.stat()
                    except OSError:
                        continue
                    if path.is_file():
                        seen.setdefault(f"{st.st_dev}:{st.st_ino}", (path, st))
        for key, (path, st) in seen.items():
            try:
                self._observe(key, path, st.st_size)
            except OSError as exc:
                log.debug("tailer: %s vanished while scanning (%s)", path, exc)
        for key in [k for k in self.files if k not in seen]:
            gone = self.files.pop(key)
            if gone.committed < gone.size:
                self.lost_bytes += gone.size - gone.committed
                log.warning("tailer: %s deleted with %d bytes not yet shipped", gone.path, gone.size - gone.committed)

    def _observe(self, key: str, path: Path, size: int) -> None:
        f = self.files.get(key)
        if f is not None and f.head_len < HEAD_BYTES and size > f.head_len and f.committed == 0 and f.read == 0:
            f = None  # fingerprint taken on an (almost) empty file: take it again
        if f is None:
            head_len = min(size, HEAD_BYTES)
            f = TailedFile(key=key, path=path, head=_fingerprint(path, head_len), head_len=head_len, size=size)
            for old in self.restored:
                if old.get("key") == key and old.get("head_len", -1) <= size and \
                        _fingerprint(path, int(old["head_len"])) == old.get("head"):
                    f.head, f.head_len = str(old["head"]), int(old["head_len"])
                    f.read = f.committed = min(int(old.get("committed", 0)), size)
            self.files[key] = f
            return
        f.path = path
        if size < f.read:
            self.truncations += 1
            log.warning("tailer: %s was truncated (%d -> %d bytes); reading it from the start", path, f.read, size)
            f.read = f.committed = 0
            f.skipping = -1
            f.head_len = min(size, HEAD_BYTES)
            f.head = _fingerprint(path, f.head_len)
        f.size = size

    def read_lines(self, max_lines: int) -> list[Chunk]:
        """Up to `max_lines` complete lines past each file's read offset (oldest path first)."""
        out: list[Chunk] = []
        budget = max_lines
        for f in sorted(self.files.values(), key=lambda f: str(f.path)):
            if budget <= 0:
                break
            if f.size <= f.read:
                continue
            try:
                with open(f.path, "rb") as fh:
                    fh.seek(f.read)
                    data = fh.read(min(f.size - f.read, READ_CHUNK))
            except OSError as exc:
                log.debug("tailer: cannot read %s (%s)", f.path, exc)
                continue
            start = f.read
            if 0 <= f.skipping <= f.read:  # inside an over-long line: drop up to its end
                nl = data.find(b"\n")
                f.read += len(data) if nl < 0 else nl + 1
                if nl >= 0:
                    f.skipping = -1
                out.append(Chunk(file=f, lines=[], end=f.read))  # committed with the rest: never read again
                continue
            end = data.rfind(b"\n")
            if end < 0:
                if len(data) >= READ_CHUNK:
                    self.oversized_lines += 1
                    log.warning("tailer: %s has a line over %d bytes at offset %d; skipping it", f.path, READ_CHUNK,
                                start)
                    f.skipping = start
                    f.read += len(data)
                    out.append(Chunk(file=f, lines=[], end=f.read))
                continue
            lines = data[: end + 1].split(b"\n")[:-1]
            if len(lines) > budget:
                lines = lines[:budget]
                end = sum(len(ln) + 1 for ln in lines) - 1
            f.read += end + 1
            budget -= len(lines)
            out.append(Chunk(file=f, lines=lines, end=f.read))
        return out

    def commit(self, cursor: dict[str, int]) -> None:
        for key, end in cursor.items():
            f = self.files.get(key)
            if f is not None and end > f.committed:
                f.committed = end

    def rewind(self) -> None:
        for f in self.files.values():
            f.read = f.committed
            if f.committed < f.skipping:
                f.skipping = -1  # found again when read again

    def backlog_bytes(self) -> int:
        return sum(max(0, f.size - f.committed) for f in self.files.values())

    def state(self) -> list[dict[str, Any]]:
        return [{"key": f.key, "path": str(f.path), "head": f.head, "head_len": f.head_len, "committed": f.committed}
                for f in self.files.values()]
