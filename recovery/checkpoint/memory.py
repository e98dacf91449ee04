"""Snapshots in the training loop, and the choice between a snapshot and a persisted checkpoint.

`Snapshots.take(step, state)` (every rank, each step; rank-local, no collective) stages the state
with its own `Stager` on the calling thread, then the `SnapshotWriter` thread writes it to the
rank's snapshot directory. While the previous snapshot is still being written it waits up to
`wait_s` (the staging buffers are reused; default 0), then skips (counted). It never raises.
A snapshot is due every `every` steps: `proposal` is the interval this rank's measured copy, write
and step times need under the checkpointer's `snapshot_budget`; the ranks take the largest at each
save (`coordination.Topology.agree`), so they snapshot the same steps.

On restore, `choose` decides for all ranks from one all-gather of what each holds (its verified
snapshot steps: its own and the copies of its rank the node agent put in the host's peer
directory — a buddy's copy of a lost host's rank, or one staged for a rank that moved here;
rank 0 adds the newest committed checkpoint's step): the newest step that every rank can
obtain, when it is at least as new as the persisted checkpoint (a memory restore is faster);
otherwise the persisted checkpoint. A minimum over ranks alone would not do: snapshots can be
skipped, so a rank may lack the minimum step while holding newer ones. A rank loads its own
snapshot of that step when it has one (source ``memory``), else the peer copy of its rank (``peer``);
with replicated state, then another replica's (see `Snapshots.sources`).
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import statistics
import time
from collections import deque
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from torch.distributed.checkpoint.stateful import Stateful

from vigil.recovery.checkpoint.coordination import Topology
from vigil.recovery.checkpoint.snapshot import Snapshot, SnapshotDir, SnapshotWriter
from vigil.recovery.checkpoint.staging import Stager

log = logging.getLogger("vigil.recovery.checkpoint")
NONE = -1
STEP_WINDOW = 16  # step times measured over the last this many snapshot() calls
MAX_EVERY = 10_000  # the chosen interval's ceiling
WRITE_MARGIN = 1.25  # the interval leaves the writer this much more than its median write


def choose(rows: Sequence[Sequence[int]], at_most: int | None = None) -> int | None:
    """The snapshot step to restore, or None (use the persisted checkpoint); none newer than `at_most`.

    Each row: ``[persisted step or -1 (rank 0's is used), held snapshot steps..., -1 padding]``.
    """
    if not rows:
        return None
    common = set.intersection(*({s for s in row[1:] if s >= 0 and (at_most is None or s <= at_most)}
                                for row in rows))
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
                 wait_s: float, peer_root: Path | None = None, replicated: bool = False) -> None:  # fmt: skip
        self.dir = SnapshotDir(root, rank=topology.rank, world_size=topology.world_size, keep=keep)
        # the node agent's copies of this rank from other hosts (read here, never written)
        self.peer = SnapshotDir(peer_root, rank=topology.rank, world_size=topology.world_size, keep=keep) if (
            peer_root is not None) else None
        self.replicated, self._world = replicated, topology.world_size
        self.every, self.keep, self.wait_s, self._pin = every, keep, wait_s, pin_memory
        self.floor = every  # the configured interval: the chosen one never goes below it
        self._calls: deque[float] = deque(maxlen=STEP_WINDOW + 1)  # when take() was called (one per step)
        self._stage_s: deque[float] = deque(maxlen=STEP_WINDOW)  # copy seconds, but the first (it allocates)
        self._write_s: deque[float] = deque(maxlen=STEP_WINDOW)  # the writer's seconds per snapshot
        self._seen_writes = 0
        self._stager: Stager | None = None
        self._writer: SnapshotWriter | None = None
        self.taken = self.skipped = 0
        self.stage_failed = 0
        self.last_stage_s = 0.0

    def take(self, step: int, state: Mapping[str, Any]) -> bool:
        """Stage and hand over a snapshot of `step` when it is due; True when handed over."""
        self._calls.append(time.perf_counter())
        self._note_write()
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
        if self.taken:
            self._stage_s.append(self.last_stage_s)
        self._writer.submit(step, staged)
        self.taken += 1
        return True

    def proposal(self, budget: float | None) -> int:
        """The interval this rank needs: its recent copies' 90th percentile within `budget` of a step (the
        budget is a bound: the mean landed on it, copies at the chosen interval run a little slower;
        one spike on shared cores does not move it), its last write done within the
        interval with room (its median write x `WRITE_MARGIN`: a skipped snapshot could leave the ranks
        without a common step); `floor` until it has measured a copy (the first one, which allocates
        the buffers, does not count) or a write, and a step. Steps are counted in `take` calls: call it
        once a step. A writer that outlasts the steps is measured even while its snapshots are skipped."""
        self._note_write()
        if budget is None or not (self._stage_s or self._write_s) or len(self._calls) < 2:
            return self.floor
        step_s = statistics.median(b - a for a, b in itertools.pairwise(self._calls))
        if step_s <= 0:
            return self.floor
        # the writes' median, with room: a writer done just at the due step would skip snapshots at random
        write_s = WRITE_MARGIN * statistics.median(self._write_s) if self._write_s else 0.0
        copies = list(self._stage_s)
        copy_s = statistics.quantiles(copies, n=10, method="inclusive")[-1] if len(copies) > 1 else sum(copies)
        need = max(math.ceil(copy_s / (budget * step_s)), math.ceil(write_s / step_s))
        return min(MAX_EVERY, max(self.floor, need))

    def _note_write(self) -> None:
        """Keep the time of a write finished since the last look (the writer thread counts them)."""
        if self._writer is not None and self._writer.written != self._seen_writes:
            self._seen_writes = self._writer.written
            self._write_s.append(self._writer.last_write_s)

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

    def sources(self) -> list[tuple[SnapshotDir, str]]:
        """Where this rank may restore from, in order of preference, and the source each one is.

        Its own directory (``memory``), then the peer copies of its rank (``peer``). With replicated
        state (every rank holds the same: ``dp_group="world"``) these two, whatever world wrote them,
        then every other rank's directory on this host, then every other rank's peer copies: a restart
        on fewer hosts (a DDP job that shrank) resumes from memory too. This rank's own state comes
        first wherever it is held: its RNG and data-loader position are its own, not a replica's (a
        rank that took over a lost host's rank number restores that rank's copy from the buddy)."""
        own: list[tuple[SnapshotDir, str]] = [(self.dir, "memory")]
        if self.peer is not None:
            own.append((self.peer, "peer"))
        if not self.replicated:
            return own
        readers = [(SnapshotDir(d.root, rank=d.rank, world_size=self._world, keep=self.keep, any_replica=True),
                    source) for d, source in own]  # fmt: skip
        for d, source in own:
            readers += [(SnapshotDir(d.root.parent / r, rank=d.rank, world_size=self._world, keep=self.keep,
                                     any_replica=True), source)
                        for r in _rank_dirs(d.root.parent) if r != d.root.name]  # fmt: skip
        return readers

    def row(self, persisted: int | None) -> list[int]:
        """This rank's row for `choose`: the persisted step, then the newest snapshot steps it can load (own
        and peer copies; 2 x `keep` wide on every rank). Its own and its rank's peer copies are re-hashed
        here; another replica's are hashed when chosen (`find`)."""
        width = 2 * self.keep
        steps: set[int] = set()
        for d, _ in self.sources():
            listed = d.held() if d is self.dir or d is self.peer else d.complete()
            steps |= {s.step for s in listed[: self.keep]}
        held = sorted(steps, reverse=True)[:width]
        return [NONE if persisted is None else persisted, *held, *[NONE] * (width - len(held))]

    def find(self, step: int) -> tuple[Snapshot, SnapshotDir, str] | None:
        """The verified snapshot of `step` to load and its source (`sources` order), or None."""
        for d, source in self.sources():
            for snap in d.complete():
                if snap.step == step and not d.verify(snap):
                    return snap, d, source
        return None

    def planted(self) -> list[Snapshot]:
        """This rank's own and peer snapshots whose marker lacks the job key's mac: never listed, reported."""
        return [snap for d in (self.dir, self.peer) if d is not None for snap in d.planted()]

    def discard_after(self, step: int | None) -> None:
        """Remove snapshots newer than the step training resumes from (all of them when None), own and
        peer copies: they belong to an abandoned future and would otherwise outrank the new ones."""
        for d, _ in self.sources():
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


def _rank_dirs(parent: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(parent) if n.isdigit())
    except OSError:
        return []
