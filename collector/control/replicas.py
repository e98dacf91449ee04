"""One host's snapshot memory as its node agent sees it: the ranks' own snapshots and the copies held for peers.

    <snapshot_root>/<host>/<job>/            VIGIL_SNAPSHOT_DIR of the host's training ranks
      <rank>/snap-<step>-<token>/            written by the rank itself (vigil.recovery.checkpoint.snapshot)
        state.pt, _COMMITTED                 the state's bytes; the JSON marker: format, step, token, rank, sha256
      peer/<rank>/snap-<step>-<token>/       copies the agent received for a peer (buddy replication) or staged
                                             before a start (a rank that moved to this host)

What the ranks write is the training job's claim about itself, never trusted: the agent reads the
marker as bounded JSON, handles `state.pt` as bytes (never unpickles, never executes anything) and
accepts a copy only when (a) the marker is well formed and names the directory's step and token,
(b) `state.pt` is at most `max_rank_bytes`, (c) the peer copies of the host stay within
`max_host_bytes` with it, and (d) the sha256 of the bytes it wrote equals the marker's (hashed while
copying), read through no symlink (a rank could point one at another file of the host) and
written into no symlinked directory. A refusal is a `Refused` reason, counted by the caller; nothing is retried. A copy lands
atomically (a hidden directory renamed into place); per rank the newest `keep` copies survive, and a
copy of step s replaces the rank's copies of steps >= s (they belong to an abandoned future).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from vigil.contract.control import RefusedCopy
from vigil.trainside.snapshot import FORMAT, MARKER, PEER, STATE
from vigil.trainside.snapshot import NAME as _NAME

__all__ = ["FORMAT", "MARKER", "PEER", "STATE", "Held", "HostStore", "Refused", "open_regular", "read"]

MAX_MARKER_BYTES = 4096
_SHA = re.compile(r"^[0-9a-f]{64}$")


Refused = RefusedCopy  # why a copy was not taken: the contract's reasons, which member reports count


@dataclass(frozen=True, kw_only=True)
class Held:
    """One complete snapshot directory (marker valid; the digest is checked when it is copied)."""

    rank: int
    step: int
    name: str
    path: Path
    size: int
    sha256: str
    marker: bytes
    peer: bool


def read(path: Path, *, peer: bool = False) -> Held | None:
    """The snapshot directory `path` when its marker is well formed and matches the name; else None."""
    m = _NAME.match(path.name)
    if m is None:
        return None
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):  # a symlink is not followed
            return None
        with open_regular(path / MARKER) as f:
            raw = f.read(MAX_MARKER_BYTES + 1)
        st = os.lstat(path / STATE)
        size = st.st_size if stat.S_ISREG(st.st_mode) else -1
        doc = json.loads(raw) if len(raw) <= MAX_MARKER_BYTES and size >= 0 else None
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict):
        return None
    rank, sha = doc.get("rank"), doc.get("sha256")
    ok = (doc.get("format") == FORMAT and doc.get("step") == int(m.group(1)) and doc.get("token") == m.group(2)
          and isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0
          and isinstance(sha, str) and _SHA.match(sha) is not None)  # fmt: skip
    if not ok:
        return None
    assert isinstance(rank, int) and isinstance(sha, str)
    return Held(rank=rank, step=int(m.group(1)), name=path.name, path=path, size=size, sha256=sha, marker=raw,
                peer=peer)


def open_regular(path: Path) -> BinaryIO:
    """`path` opened for reading when it is a regular file, never through a symlink (OSError otherwise):
    the ranks own the directories the agent reads, and must not make it copy another file of the host."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(f"{path}: not a regular file")
    return os.fdopen(fd, "rb")


def _real_dir(path: Path) -> None:
    """Create `path` (parents too) and make sure neither it nor its two parents are symlinks (OSError otherwise):
    the ranks can write in the host's snapshot memory, and must not redirect the agent's writes."""
    for d in (path.parent.parent, path.parent, path):
        if d.is_symlink():
            raise OSError(f"{d}: a symlink")
    path.mkdir(parents=True, exist_ok=True)
    for d in (path.parent, path):
        if not stat.S_ISDIR(os.lstat(d).st_mode):
            raise OSError(f"{d}: not a directory")


def _hand_over(paths: list[Path], owner: os.stat_result) -> None:
    """The agent's copies made the snapshot root owner's (`vigil run --user`: the ranks' uid), modes 0700/0600."""
    for p in paths:
        os.chmod(p, 0o700 if p.is_dir() else 0o600)
        if os.geteuid() == 0 and owner.st_uid != 0:
            os.chown(p, owner.st_uid, owner.st_gid)


class HostStore:
    """The snapshot memory of one host for one job (see the module docstring)."""

    def __init__(self, root: Path, *, keep: int, max_rank_bytes: int, max_host_bytes: int) -> None:
        self.root, self.keep = root, keep
        self.max_rank_bytes, self.max_host_bytes = max_rank_bytes, max_host_bytes

    def own_dir(self, rank: int) -> Path:
        return self.root / str(rank)

    def peer_dir(self, rank: int) -> Path:
        return self.root / PEER / str(rank)

    def own_ranks(self) -> list[int]:
        return _ranks(self.root)

    def peer_ranks(self) -> list[int]:
        return _ranks(self.root / PEER)

    def held(self, rank: int, *, own: bool = True, peer: bool = True) -> list[Held]:
        """The complete snapshots of `rank` here (own and/or peer copies), newest first."""
        found: list[Held] = []
        for d, is_peer in ((self.own_dir(rank), False), (self.peer_dir(rank), True)):
            if (is_peer and not peer) or (not is_peer and not own):
                continue
            try:
                names = os.listdir(d)
            except OSError:
                continue
            for name in names:
                h = read(d / name, peer=is_peer)
                if h is not None and h.rank == rank:
                    found.append(h)
        return sorted(found, key=lambda h: (h.step, not h.peer, h.name), reverse=True)

    def peer_bytes(self) -> int:
        return sum(h.size for r in self.peer_ranks() for h in self.held(r, own=False))

    def admit(self, held: Held) -> Refused | None:
        """Whether a copy of `held` fits the bounds (before any byte is copied)."""
        if held.size > self.max_rank_bytes:
            return Refused.TOO_LARGE
        replaced = sum(h.size for h in self.held(held.rank, own=False) if h.step >= held.step)
        if self.peer_bytes() - replaced + held.size > self.max_host_bytes:
            return Refused.HOST_FULL
        return None

    def accept(self, held: Held, data: BinaryIO) -> Refused | None:
        """Copy `held` (its state's bytes read from `data`) into this host's peer copies; None when kept."""
        if (why := self.admit(held)) is not None:
            return why
        target = self.peer_dir(held.rank)
        tmp = target / f".in-{held.name}-{secrets.token_hex(4)}"
        try:
            _real_dir(target)
            tmp.mkdir(mode=0o700)
            h, copied = hashlib.sha256(), 0
            with open(os.open(tmp / STATE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as out:
                while chunk := data.read(1 << 20):
                    copied += len(chunk)
                    if copied > held.size or copied > self.max_rank_bytes:
                        return Refused.TOO_LARGE  # the file grew after it was listed
                    h.update(chunk)
                    out.write(chunk)
            if h.hexdigest() != held.sha256:
                return Refused.DIGEST
            (tmp / MARKER).write_bytes(held.marker)
            _hand_over([target.parent, target, tmp, tmp / STATE, tmp / MARKER], self.root.stat())
            for old in self.held(held.rank, own=False):
                if old.step >= held.step:
                    shutil.rmtree(old.path, ignore_errors=True)
            os.replace(tmp, target / held.name)
        except OSError:
            return Refused.IO
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        for old in self.held(held.rank, own=False)[self.keep:]:
            shutil.rmtree(old.path, ignore_errors=True)
        return None

    def drop_own(self, keep_ranks: set[int]) -> None:
        """Remove the own snapshots of ranks this host no longer runs (their state moved elsewhere)."""
        for rank in self.own_ranks():
            if rank not in keep_ranks:
                shutil.rmtree(self.own_dir(rank), ignore_errors=True)


def _ranks(d: Path) -> list[int]:
    try:
        return sorted(int(n) for n in os.listdir(d) if n.isdigit())
    except OSError:
        return []
