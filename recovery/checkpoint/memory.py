"""Snapshots in the training loop, and the choice between a snapshot and a persisted checkpoint.

`Snapshots.take(step, state)` (every rank, each step; rank-local, no collective) stages the state
with its own `Stager` on the calling thread, then the `SnapshotWriter` thread writes it to the
rank's snapshot directory. While the previous snapshot is still being written it waits up to
`wait_s` (the staging buffers are reused; default 0), then skips (counted). It never raises.

On restore, `choose` decides for all ranks from one all-gather of what each holds (its verified
snapshot steps: its own and the copies of its rank the node agent put in the host's peer
directory — a buddy's copy of a lost host's rank, or one staged for a rank that moved here;
rank 0 adds the newest committed checkpoint's step): the newest step that every rank can
obtain, when it is at least as new as the persisted checkpoint (a memory restore is faster);
otherwise the persisted checkpoint. A minimum over ranks alone would not do: snapshots can be
skipped, so a rank may lack the minimum step while holding newer ones. A rank loads its own
snapshot of that step when it has one (source ``memory``), else the peer copy (``peer``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.stateful import Stateful

from vigil.recovery.checkpoint.coordination import Topology
from vigil.recovery.checkpoint.snapshot import Snapshot, SnapshotDir, SnapshotWriter
from vigil.recovery.checkpoint.staging import Stager

log = logging.getLogger("vigil.recovery.checkpoint")
NONE = -1


def choose(rows: Sequence[Sequence[int]]) -> int | None:
    """The snapshot step to restore, or None (use the persisted checkpoint).

    Each row: ``[persisted step or -1 (rank 0's is used), held snapshot steps..., -1 padding]``.
    """
    if not rows:
        return None
    common = set.intersection(*({s for s in row[1:] if s >= 0} for row in rows))
    if not common:
        return None
    best = max(common)
    return best if best >= rows[0][0] else None


def assign(state: MutableMapping[str, Any], sd: Mapping[str, Any]) -> None:
    """Hand loaded values to the `Stateful`s of `state`, replace the plain ones (as `dcp.load` does)."""
    for key, value in state.items():
        if isinstance(value, Stateful):
            value.load_state_dict(sd[key])
        else:
            state[key] = sd[key]


class Snapshots:
    """This rank's in-memory snapshots: taking them, listing them for the restore agreement, loading one."""

    def __init__(self, root: Path, *, topology: Topology, every: int, keep: int, pin_memory: bool | None,
                 wait_s: float, peer_root: Path | None = None) -> None:  # fmt: skip
        self.dir = SnapshotDir(root, rank=topology.rank, world_size=topology.world_size, keep=keep)
        # the node agent's copies of this rank from other hosts (read here, never written)
        self.peer = SnapshotDir(peer_root, rank=topology.rank, world_size=topology.world_size, keep=keep) if (
            peer_root is not None) else None
        self.every, self.keep, self.wait_s, self._pin = every, keep, wait_s, pin_memory
        self._stager: Stager | None = None
        self._writer: SnapshotWriter | None = None
        self.taken = self.skipped = 0
        self.stage_failed = 0
        self.last_stage_s = 0.0

    def take(self, step: int, state: Mapping[str, Any]) -> bool:
        """Stage and hand over a snapshot of `step` when it is due; True when handed over."""
        if isinstance(step, bool) or not isinstance(step, int) or step < 0 or step % self.every:
            return False
        if self._writer is None:
            self._stager, self._writer = Stager(pin_memory=self._pin), SnapshotWriter(self.dir)
        if not self._writer.wait_idle(self.wait_s):
            self.skipped += 1
            return False
        assert self._stager is not None
        t0 = time.perf_counter()
        try:
            staged = self._stager.stage(state)
        except Exception as exc:
            self.stage_failed += 1
            if self.stage_failed == 1:
                log.warning("snapshot of step %d: staging failed: %s: %s", step, type(exc).__name__, exc)
            return False
        self.last_stage_s = time.perf_counter() - t0
        self._writer.submit(step, staged)
        self.taken += 1
        return True

    @property
    def written(self) -> int:
        return self._writer.written if self._writer is not None else 0

    @property
    def write_s(self) -> float:
        return self._writer.write_s if self._writer is not None else 0.0

    @property
    def failed(self) -> int:
        return (self._writer.failed if self._writer is not None else 0) + self.stage_failed

    def wait(self, timeout: float | None) -> bool:
        return self._writer.wait_idle(timeout) if self._writer is not None else True

    @property
    def dirs(self) -> list[SnapshotDir]:
        return [self.dir] if self.peer is None else [self.dir, self.peer]

    def row(self, persisted: int | None) -> list[int]:
        """This rank's row for `choose`: the persisted step, then its verified snapshot steps (own and peer
        copies, at most `keep` of each: the row has the same length on every rank)."""
        width = self.keep * len(self.dirs)
        held = sorted({s.step for d in self.dirs for s in d.held()[: self.keep]}, reverse=True)
        return [NONE if persisted is None else persisted, *held, *[NONE] * (width - len(held))]

    def find(self, step: int) -> tuple[Snapshot, SnapshotDir, str] | None:
        """The snapshot of `step` to load and its source: this rank's own (``memory``), else a peer copy."""
        for d, source in zip(self.dirs, ("memory", "peer"), strict=False):
            if (snap := next((s for s in d.complete() if s.step == step), None)) is not None:
                return snap, d, source
        return None

    def discard_after(self, step: int | None) -> None:
        """Remove snapshots newer than the step training resumes from (all of them when None), own and
        peer copies: they belong to an abandoned future and would otherwise outrank the new ones."""
        for d in self.dirs:
            for snap in d.complete():
                if step is None or snap.step > step:
                    d.remove(snap)

    def close(self, timeout: float | None) -> bool:
        if self._writer is None:
            return True
        idle = self._writer.close(timeout)
        if idle and self._stager is not None:
            self._stager.close()
        return idle
