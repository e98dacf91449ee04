"""The storage checkpoints go to: DCP's writers and readers, and the few operations they lack.

`torch.distributed.checkpoint` writes and reads a checkpoint's files; listing attempt
directories and the files in one, hashing a file (sha256, streamed in 1 MiB reads),
writing the commit marker atomically and removing directories are done here,
for a POSIX path (`LocalStore`: the marker goes through a temporary name, fsync, rename and
directory fsyncs) or an fsspec URL (`FsspecStore`, through DCP's own fsspec wrapper: the
marker is one PUT, which object stores make all-or-nothing).
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import secrets
import shutil
from abc import ABC, abstractmethod
from typing import Any

from torch.distributed.checkpoint.filesystem import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

MAX_SMALL_BYTES = 64 << 10
HASH_CHUNK = 1 << 20


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
    def files(self, path: str) -> list[str]:
        """Every file under directory `path`, as sorted '/'-separated relative names. Raises OSError."""

    @abstractmethod
    def sha256(self, path: str) -> str:
        """The hex sha256 of a file's bytes. Raises OSError."""

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
                data = fh.read(MAX_SMALL_BYTES + 1)
        except OSError:
            return None
        return data if len(data) <= MAX_SMALL_BYTES else None

    def files(self, path: str) -> list[str]:
        if not os.path.isdir(path):
            raise NotADirectoryError(path)
        found = []
        for top, _dirs, names in os.walk(path):
            rel = os.path.relpath(top, path)
            found += [n if rel == "." else f"{rel}/{n}".replace(os.sep, "/") for n in names]
        return sorted(found)

    def sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            while chunk := fh.read(HASH_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

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
        return bytes(data) if len(data) <= MAX_SMALL_BYTES else None

    def files(self, path: str) -> list[str]:
        base = path.rstrip("/")
        if not self._fs.isdir(base):
            raise NotADirectoryError(path)
        names = [str(f) for f in self._fs.find(base)]
        prefix = self._fs._strip_protocol(base).rstrip("/") + "/"
        return sorted(n[len(prefix):] if n.startswith(prefix) else posixpath.basename(n) for n in names)

    def sha256(self, path: str) -> str:
        digest = hashlib.sha256()
        with self._fs.open(path, "rb") as fh:
            while chunk := fh.read(HASH_CHUNK):
                digest.update(chunk)
        return digest.hexdigest()

    def write_atomic(self, path: str, data: bytes) -> None:
        self._fs.pipe_file(path, data)  # one PUT: object stores make it all-or-nothing

    def remove_tree(self, path: str) -> None:
        self._fs.rm(path, recursive=True)


def open_store(directory: str | os.PathLike[str]) -> Store:
    root = str(os.fspath(directory))
    return FsspecStore(root) if is_url(root) else LocalStore(os.path.abspath(os.path.expanduser(root)))


def is_url(directory: str | os.PathLike[str]) -> bool:
    return "://" in str(os.fspath(directory))


def default_writer(path: str, *, sync_files: bool, threads: int) -> StorageWriter:
    """DCP's writer for one attempt directory (fsspec for a URL)."""
    if is_url(path):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecWriter

        return FsspecWriter(path, sync_files=sync_files, thread_count=threads, overwrite=True)
    return FileSystemWriter(path, sync_files=sync_files, thread_count=threads, overwrite=True)


def default_reader(path: str) -> StorageReader:
    if is_url(path):
        from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

        return FsspecReader(path)
    return FileSystemReader(path)


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
