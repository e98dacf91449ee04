"""Buddy replication of in-memory snapshots, and staging a moved rank's snapshots before a start.

The node agent of each host of a running world pushes every new snapshot its ranks write
(`<snapshot_dir>/<rank>`, the newest `keep`) to its **buddy**, the next host in the world's ring
(`hosts[(node_rank + 1) % nnodes]`), so a lost host's newest state survives on another host.
Before the agent starts a generation, it **stages** the snapshots each of its ranks will need
and does not hold (a spare taking a lost host's place, or a rank that moved to another host):
from the other hosts of the new world (never from hosts outside it: a lost host's memory is
gone) it fetches, per rank, the newest `keep` steps it lacks into its peer copies, where the
rank's `Checkpointer.load_latest` finds them. The ranks then agree on the step with their one
collective, as before.

Bounded: what a host keeps is bounded by its `HostStore` (per-rank size, host total, `keep` per
rank); a refused copy is counted by reason (`Replication.refused`) and logged once per reason,
never retried unless the failure was I/O. The agent's thread polls every `interval_s`; nothing
here touches the training processes. `report()` gives the counters as the contract's
`SnapshotReplication`, which the agent's `member` reports carry to the event log.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field

from vigil.collector.control.buddies import Transport
from vigil.collector.control.replicas import Held, HostStore, Refused
from vigil.contract import SnapshotReplication, World

log = logging.getLogger(__name__)


def local_ranks(world: World, nproc: int) -> list[int]:
    """The global ranks a host runs: torchrun's node_rank * nproc_per_node + local rank."""
    return list(range(world.node_rank * nproc, (world.node_rank + 1) * nproc))


def buddy_of(world: World) -> str | None:
    """The next host in the world's ring, or None when the world is one host."""
    return world.hosts[(world.node_rank + 1) % world.nnodes] if world.nnodes > 1 else None


@dataclass(kw_only=True)
class Replication:
    """The replicator's counters (since the agent started); `last_step`: the newest step pushed to the buddy."""

    pushed: int = 0
    staged: int = 0
    pushed_bytes: int = 0
    staged_bytes: int = 0
    last_step: int | None = None
    refused: Counter[Refused] = field(default_factory=Counter)


class Replicator:
    """Pushes this host's new snapshots to its buddy; stages a new world's snapshots before a start."""

    def __init__(self, store: HostStore, transport: Transport, *, host: str, interval_s: float = 0.2) -> None:
        self.store, self.transport, self.host, self.interval_s = store, transport, host, interval_s
        self.stats = Replication()
        self._lock = threading.Lock()
        self._buddy: str | None = None
        self._ranks: list[int] = []
        self._sent: set[tuple[str, str]] = set()  # (buddy, snapshot path) pushed or refused for good
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- the world -------------------------------------------------------------------------------
    def follow(self, world: World, nproc: int) -> None:
        """Replicate the ranks this host runs in `world` to its buddy there."""
        with self._lock:
            self._ranks, self._buddy = local_ranks(world, nproc), buddy_of(world)
        log.info("snapshots of ranks %s replicate to %s", self._ranks, self._buddy or "nobody (one host)")

    def stage(self, world: World, nproc: int) -> int:
        """Fetch what this host's ranks of `world` need from the world's other hosts; the copies staged."""
        staged = 0
        others = [h for h in world.hosts if h != self.host]
        with self._lock:
            for rank in local_ranks(world, nproc):
                have = {h.step for h in self.store.held(rank)}
                wanted: dict[int, list[tuple[str, Held]]] = {}
                for host in others:
                    for held in self.transport.offers(host, rank):
                        if held.step not in have:
                            wanted.setdefault(held.step, []).append((host, held))
                newest = sorted(have | set(wanted), reverse=True)[: self.store.keep]
                for step in sorted(s for s in newest if s in wanted):  # oldest first: a copy replaces newer ones
                    for host, held in wanted[step]:
                        why = self.transport.fetch(host, held, self.store)
                        if why is None:
                            staged += 1
                            self.stats.staged_bytes += held.size
                            log.info("staged rank %d's snapshot of step %d from %s", rank, step, host)
                            break
                        self._refused(why, f"staging rank {rank} step {step} from {host}")
            self.stats.staged += staged
        return staged

    def settled(self) -> None:
        """The world trains: own snapshots of ranks this host no longer runs are not needed any more."""
        with self._lock:
            self.store.drop_own(set(self._ranks))

    # ---- pushing ---------------------------------------------------------------------------------
    def tick(self) -> int:
        """Push the snapshots not yet sent to the buddy (oldest first); how many it kept."""
        pushed = 0
        with self._lock:
            buddy = self._buddy
            if buddy is None:
                return 0
            current: set[tuple[str, str]] = set()
            for rank in self._ranks:
                for held in reversed(self.store.held(rank, peer=False)[: self.store.keep]):
                    key = (buddy, str(held.path))
                    current.add(key)
                    if key in self._sent:
                        continue
                    why = self.transport.push(buddy, held)
                    if why is None:
                        pushed += 1
                        self.stats.pushed_bytes += held.size
                        self.stats.last_step = max(held.step, self.stats.last_step or 0)
                    else:
                        self._refused(why, f"rank {rank} step {held.step} to {buddy}")
                    if why is not Refused.IO:  # only I/O is worth another try
                        self._sent.add(key)
            self._sent &= current  # bounded: only what is still on the host
            self.stats.pushed += pushed
        return pushed

    def report(self) -> SnapshotReplication:
        """The counters as the contract carries them (in the agent's `member` reports). Without the lock: a copy
        in flight holds it for as long as the copy takes, and a member report (an exit) must not wait for it."""
        st, refused = self.stats, list(self.stats.refused.items())  # list(): one step under the GIL
        return SnapshotReplication(buddy=self._buddy, pushed=st.pushed, staged=st.staged, pushed_bytes=st.pushed_bytes,
                                   staged_bytes=st.staged_bytes, refused={r.value: n for r, n in refused},
                                   last_step=st.last_step)  # fmt: skip

    def _refused(self, why: Refused, what: str) -> None:
        self.stats.refused[why] += 1
        if self.stats.refused[why] == 1 or self.stats.refused[why] % 100 == 0:
            log.warning("snapshot copy refused (%s, %d so far): %s", why.value, self.stats.refused[why], what)

    # ---- the thread ------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="vigil-replicate", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.tick()
            except Exception:  # a bug must not end replication for good
                log.exception("snapshot replication failed")
