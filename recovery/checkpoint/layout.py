"""Where checkpoints live, how one is committed, and which ones are kept.

    <directory>/
      step-0000001200-3fa9c2d1/      one attempt to save step 1200 (token: rank 0's, per attempt)
        __0_0.distcp  __1_0.distcp   each rank's part (torch.distributed.checkpoint files)
        .metadata                    DCP's global metadata, written by rank 0 after every part
        _COMMITTED                   the commit marker: JSON, written last, atomically

A checkpoint is complete if and only if its `_COMMITTED` marker exists and names the
directory's own step and token. The persister writes it only after `dcp.save` returned,
which on rank 0 means every rank's files were written (and fsynced with `sync_files`)
and `.metadata` was renamed into place. On a POSIX path the marker is written to a
temporary name, fsynced, renamed, and the directory and its parent are fsynced: a crash
at any point leaves either no marker (the attempt is ignored, then pruned) or a whole one.
On an fsspec URL the marker is one object PUT, which object stores make atomic.

Each attempt has its own directory (the token), so re-saving a step after a restart never
mixes with a torn attempt of the same step, nor overwrites a committed one in place.

"Newest" is the latest commit (marker time, then step): after a deliberate rollback the
new lineage wins over abandoned later steps. `prune` keeps the newest `keep` complete
checkpoints and removes every incomplete attempt; it runs on rank 0 after a commit,
while no other save is in flight.
"""

from __future__ import annotations

import json
import os
import posixpath
import re
import secrets
import shutil
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

MARKER = "_COMMITTED"
FORMAT = "vigil-checkpoint/1"
MAX_MARKER_BYTES = 64 << 10
_NAME = re.compile(r"^step-(\d{10,})-([0-9a-f]{8})$")


def dir_name(step: int, token: int) -> str:
    return f"step-{step:010d}-{token & 0xFFFFFFFF:08x}"


def parse_name(name: str) -> tuple[int, str] | None:
    """(step, token) of an attempt directory's name; None for anything else."""
    m = _NAME.match(name)
    return (int(m.group(1)), m.group(2)) if m else None


@dataclass(frozen=True, kw_only=True)
class Commit:
    """A complete checkpoint, as its marker describes it."""

    name: str
    path: str
    step: int
    committed_at: float  # unix seconds (rank 0's clock)
    world_size: int
    nbytes: int


class Store(ABC):
    """The few operations on the checkpoint root that DCP's writers and readers do not cover."""

    def __init__(self, root: str) -> None:
        self.root = root

    @abstractmethod
    def join(self, name: str, *more: str) -> str: ...

    @abstractmethod
    def names(self) -> list[str]:
        """Entries directly under the root ([] when it does not exist)."""

    @abstractmethod
    def read_small(self, path: str) -> bytes | None:
        """A small file's bytes; None when missing, unreadable or too large."""

    @abstractmethod
    def write_atomic(self, path: str, data: bytes) -> None: ...

    @abstractmethod
    def remove_tree(self, path: str) -> None: ...

    def free_bytes(self) -> int | None:
        """Free space where checkpoints go, when the storage can tell."""
        return None


class LocalStore(Store):
    def join(self, name: str, *more: str) -> str:
        return os.path.join(self.root, name, *more)

    def names(self) -> list[str]:
        try:
            return os.listdir(self.root)
        except (FileNotFoundError, NotADirectoryError):
            return []

    def read_small(self, path: str) -> bytes | None:
        try:
            with open(path, "rb") as fh:
                data = fh.read(MAX_MARKER_BYTES + 1)
        except OSError:
            return None
        return data if len(data) <= MAX_MARKER_BYTES else None

    def write_atomic(self, path: str, data: bytes) -> None:
        tmp = f"{path}.tmp-{os.getpid()}-{secrets.token_hex(4)}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.replace(tmp, path)
        except OSError:
            _unlink_quietly(tmp)
            raise
        parent = os.path.dirname(path)
        _fsync_dir(parent)  # the marker's and DCP's .metadata renames
        _fsync_dir(os.path.dirname(parent))  # the checkpoint directory's own entry

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path)

    def free_bytes(self) -> int | None:
        path = self.root
        while not os.path.isdir(path) and os.path.dirname(path) != path:
            path = os.path.dirname(path)
        try:
            st = os.statvfs(path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize


class FsspecStore(Store):
    """An fsspec URL, through torch.distributed.checkpoint's own fsspec filesystem wrapper."""

    def __init__(self, root: str) -> None:
        super().__init__(root.rstrip("/"))
        from torch.distributed.checkpoint._fsspec_filesystem import FileSystem

        wrapper = FileSystem()
        wrapper.init_path(self.root)
        self._fs: Any = wrapper.fs

    def join(self, name: str, *more: str) -> str:
        return "/".join((self.root, name, *more))

    def names(self) -> list[str]:
        try:
            entries = self._fs.ls(self.root, detail=False)
        except (FileNotFoundError, NotADirectoryError):
            return []
        return [posixpath.basename(str(e).rstrip("/")) for e in entries]

    def read_small(self, path: str) -> bytes | None:
        try:
            data = self._fs.cat_file(path)
        except (OSError, ValueError):
            return None
        return bytes(data) if len(data) <= MAX_MARKER_BYTES else None

    def write_atomic(self, path: str, data: bytes) -> None:
        self._fs.pipe_file(path, data)  # one PUT: object stores make it all-or-nothing

    def remove_tree(self, path: str) -> None:
        self._fs.rm(path, recursive=True)


def open_store(directory: str | os.PathLike[str]) -> Store:
    root = str(os.fspath(directory))
    return FsspecStore(root) if "://" in root else LocalStore(os.path.abspath(os.path.expanduser(root)))


class Layout:
    """Attempt directories, commit markers and retention under one checkpoint root."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def path(self, name: str) -> str:
        return self.store.join(name)

    def attempts(self) -> list[str]:
        return sorted(n for n in self.store.names() if parse_name(n) is not None)

    def read_commit(self, name: str) -> Commit | None:
        """The commit of attempt `name`, or None when it is not (validly) committed."""
        parsed = parse_name(name)
        raw = self.store.read_small(self.store.join(name, MARKER)) if parsed else None
        if parsed is None or raw is None:
            return None
        try:
            doc = json.loads(raw)
            if doc.get("format") != FORMAT or doc.get("step") != parsed[0] or doc.get("token") != parsed[1]:
                return None
            return Commit(
                name=name, path=self.path(name), step=parsed[0], committed_at=float(doc["committed_at"]),
                world_size=int(doc.get("world_size", 1)), nbytes=int(doc.get("bytes", 0)),
            )  # fmt: skip
        except (ValueError, TypeError, KeyError, AttributeError):
            return None

    def committed(self) -> list[Commit]:
        """Every complete checkpoint, newest first."""
        found = [c for n in self.attempts() if (c := self.read_commit(n)) is not None]
        return sorted(found, key=lambda c: (c.committed_at, c.step, c.name), reverse=True)

    def commit(self, name: str, *, world_size: int, nbytes: int) -> Commit:
        """Write the marker of attempt `name` (last, atomically). Raises OSError on failure."""
        parsed = parse_name(name)
        if parsed is None:
            raise ValueError(f"not an attempt directory name: {name!r}")
        now = time.time()
        doc = {
            "format": FORMAT, "step": parsed[0], "token": parsed[1], "committed_at": now,
            "committed_at_iso": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
            "world_size": world_size, "bytes": nbytes,
        }  # fmt: skip
        self.store.write_atomic(self.store.join(name, MARKER), json.dumps(doc, sort_keys=True).encode())
        return Commit(name=name, path=self.path(name), step=parsed[0], committed_at=now, world_size=world_size,
                      nbytes=nbytes)  # fmt: skip

    def discard(self, name: str) -> bool:
        """Remove attempt `name`; False when it could not be removed (never raises)."""
        try:
            self.store.remove_tree(self.path(name))
            return True
        except (OSError, ValueError):
            return False

    def prune(self, keep: int | None, *, protect: str) -> list[str]:
        """Remove incomplete attempts and complete checkpoints beyond the newest `keep`.

        `protect` (the attempt just committed) is never removed. Returns the names removed.
        """
        complete = self.committed()
        kept = {c.name for c in (complete if keep is None else complete[:keep])} | {protect}
        removed = [n for n in self.attempts() if n not in kept and self.discard(n)]
        return removed


def _fsync_dir(path: str) -> None:
    try:
        fd = os.open(path or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems cannot fsync a directory; the rename itself is atomic
    finally:
        os.close(fd)


def _unlink_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
