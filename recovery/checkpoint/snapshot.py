"""In-memory snapshots: this rank's whole state in host memory every few steps, the last K kept.

    <snapshot_dir>/<rank>/               default /dev/shm/vigil/<job>/<rank> (tmpfs: host memory)
      snap-0000001234-3fa9c2d1/          one snapshot of step 1234 (token: random, per attempt)
        state.pt                         torch.save of this rank's staged state dict
        _COMMITTED                       JSON marker, written last, atomically: step, rank, world, sha256
    <snapshot_dir>/peer/<rank>/          the same, copied here by the node agent from another host
                                         (buddy replication, or staged for a rank that moved here)

(The names and the marker's ``format`` live in `vigil.trainside.snapshot`, shared with the node agent.)

A snapshot is rank-local (no collective to write it): the caller stages the state into host
buffers (`staging.Stager`, the checkpointer's own staging) on the training thread, and the
writer thread of this module saves it, hashes it and writes the marker. A snapshot counts
only when its marker names the directory's step and token, this rank and world size, and the
sha256 of ``state.pt`` and, with the job's integrity key (`integrity`), carries its mac: a
snapshot planted with a recomputed marker is never listed, and pruned. `held` re-hashes before
listing it, so a torn or altered snapshot is never restored. The job's snapshot root and each
rank's folder are this uid's, mode 0700 (one of another uid is refused), every file 0600. Retention: the newest `keep` complete snapshots survive each write; incomplete
attempts are removed. Memory bound: at most ``keep + 1`` snapshots on the tmpfs (the one being
written), each the size of the rank's state, plus one staged copy in the process.

Loading uses ``torch.load(weights_only=True)``: tensors and plain containers only.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import queue
import secrets
import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from vigil.recovery.checkpoint.integrity import authentic, job_key, private_dir, seal
from vigil.recovery.checkpoint.staging import Staged
from vigil.trainside.snapshot import FORMAT, MARKER, PEER, STATE, default_snapshot_dir, snapshot_name
from vigil.trainside.snapshot import NAME as _NAME

log = logging.getLogger("vigil.recovery.checkpoint")
__all__ = ["FORMAT", "MARKER", "PEER", "STATE", "Snapshot", "SnapshotDir", "SnapshotWriter", "default_snapshot_dir"]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True, kw_only=True)
class Snapshot:
    step: int
    path: Path


class SnapshotDir:
    """The snapshots of one rank under one directory: write, list (verified), load, prune."""

    def __init__(self, root: Path, *, rank: int, world_size: int, keep: int, any_replica: bool = False) -> None:
        """`any_replica`: list the snapshots of any rank and world size (a replica's state serves every rank)."""
        self.root, self.rank, self.world_size, self.keep = root, rank, world_size, keep
        self.any_replica = any_replica
        self.key = job_key()  # the job's integrity key (`integrity`): a marker without its mac is not a snapshot

    def write(self, step: int, state_dict: dict[str, Any]) -> Snapshot:
        """Save `state_dict` as the snapshot of `step`, marker last; prune. Raises OSError on failure."""
        name = snapshot_name(step, secrets.randbits(32))
        private_dir(self.root.parent)  # the job's snapshot root: this uid's only (another's: PermissionError)
        path = private_dir(self.root) / name
        path.mkdir(mode=0o700, exist_ok=False)
        try:
            with open(os.open(path / STATE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
                torch.save(state_dict, fh)
            doc = seal({"format": FORMAT, "step": step, "token": name[-8:], "rank": self.rank,
                        "world_size": self.world_size, "sha256": _sha256(path / STATE), "written_at": time.time()},
                       self.key)  # fmt: skip
            tmp = path / f"{MARKER}.tmp"
            with open(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as fh:
                fh.write(json.dumps(doc, sort_keys=True).encode())
            os.replace(tmp, path / MARKER)
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        self.prune(protect=name)
        return Snapshot(step=step, path=path)

    def _marker(self, name: str, *, sealed: bool = True) -> int | None:
        """The step of snapshot `name` when its marker is valid for this rank and world (no hashing); with
        `sealed` False, when it is well formed for them but lacks the job key's mac (planted)."""
        m = _NAME.match(name)
        try:
            doc = json.loads((self.root / name / MARKER).read_bytes()) if m else None
        except (OSError, ValueError):
            return None
        if m is None or not isinstance(doc, dict):
            return None
        ok = (doc.get("format") == FORMAT and doc.get("step") == int(m.group(1)) and doc.get("token") == m.group(2)
              and (self.any_replica or (doc.get("rank") == self.rank and doc.get("world_size") == self.world_size))
              and authentic(doc, self.key) == sealed)  # fmt: skip
        return int(m.group(1)) if ok else None

    def planted(self) -> list[Snapshot]:
        """Snapshots whose marker is well formed but not made with the job's integrity key (none without one)."""
        if self.key is None:
            return []
        return [Snapshot(step=s, path=self.root / n) for n in self._names()
                if (s := self._marker(n, sealed=False)) is not None]  # fmt: skip

    def _names(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root) if _NAME.match(n))
        except OSError:
            return []

    def complete(self) -> list[Snapshot]:
        """Snapshots with a valid marker, newest first (digests not checked)."""
        found = [Snapshot(step=s, path=self.root / n) for n in self._names() if (s := self._marker(n)) is not None]
        return sorted(found, key=lambda s: (s.step, s.path.name), reverse=True)

    def verify(self, snap: Snapshot) -> str:
        """'' when ``state.pt`` matches the marker's sha256; else why not."""
        try:
            want = json.loads((snap.path / MARKER).read_bytes()).get("sha256")
            return "" if _sha256(snap.path / STATE) == want else f"{snap.path.name}: sha256 does not match"
        except (OSError, ValueError, AttributeError) as exc:
            return f"{snap.path.name}: cannot verify: {type(exc).__name__}: {exc}"

    def held(self) -> list[Snapshot]:
        """The verified snapshots, newest first (each one re-hashed)."""
        out = []
        for snap in self.complete():
            if why := self.verify(snap):
                log.warning("snapshot not usable: %s", why)
                continue
            out.append(snap)
        return out

    def load(self, snap: Snapshot) -> dict[str, Any]:
        loaded = torch.load(snap.path / STATE, map_location="cpu", weights_only=True)
        if not isinstance(loaded, dict):
            raise TypeError(f"{snap.path}: not a state dict")
        return loaded

    def remove(self, snap: Snapshot) -> None:
        shutil.rmtree(snap.path, ignore_errors=True)

    def prune(self, *, protect: str) -> None:
        """Keep the newest `keep` complete snapshots (and `protect`); remove the rest and every incomplete one."""
        kept = {s.path.name for s in self.complete()[: self.keep]} | {protect}
        for name in self._names():
            if name not in kept:
                shutil.rmtree(self.root / name, ignore_errors=True)


class SnapshotWriter:
    """One daemon thread writing staged snapshots; one at a time (the staging buffers are reused)."""

    def __init__(self, directory: SnapshotDir) -> None:
        self.directory = directory
        self._inbox: queue.Queue[tuple[int, Staged] | None] = queue.Queue(maxsize=1)
        self._idle = threading.Event()
        self._idle.set()
        self.written = self.failed = 0
        self.write_s = 0.0  # total seconds spent writing (save, hash, marker, prune)
        self.last_write_s = 0.0  # the last snapshot's
        self.last_error = ""
        self.last_step: int | None = None
        self._thread = threading.Thread(target=self._run, name="vigil-ckpt-snapshot", daemon=True)
        self._thread.start()

    def wait_idle(self, timeout: float | None) -> bool:
        return self._idle.wait(timeout)

    def submit(self, step: int, staged: Staged) -> None:
        """Hand over one staged state; the caller made sure the writer is idle."""
        self._idle.clear()
        self._inbox.put_nowait((step, staged))

    def close(self, timeout: float | None) -> bool:
        idle = self._idle.wait(timeout)
        try:
            self._inbox.put_nowait(None)
        except queue.Full:
            pass
        if idle:
            self._thread.join(timeout)
        return idle

    def _run(self) -> None:
        while (item := self._inbox.get()) is not None:
            step, staged = item
            t0 = time.perf_counter()
            try:
                self.directory.write(step, staged.state_dict)
                self.last_write_s = time.perf_counter() - t0
                self.write_s += self.last_write_s
                self.written += 1
                self.last_step = step
            except BaseException as exc:  # a full tmpfs or a bug: count, never kill the thread
                self.failed += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                if self.failed == 1 or self.failed % 100 == 0:
                    log.warning("snapshot of step %d failed (%d so far): %s", step, self.failed, self.last_error)
            finally:
                self._idle.set()
