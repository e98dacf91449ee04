"""Phase 2 of a save: persist the staged copy in the background, then commit it.

One daemon thread per `Checkpointer` takes one job at a time (the facade submits only
when the thread is idle and every rank agreed) and does, in order:

1. `torch.distributed.checkpoint.save` of the staged state dict into the attempt's
   directory over the checkpointer's own gloo ``persist`` group: each rank writes its
   part (replicated tensors are written once, by one rank, DCP's default dedup) and
   fsyncs it; rank 0 writes `.metadata` once every rank reported its writes. This is
   what `dcp.async_save` does on its thread; running it here lets the commit and
   retention follow in the same thread, in order.
2. every rank: a ``persisted`` event (or ``failed`` when any rank's write failed: DCP
   gathers write errors to every rank, so all ranks fail the same save).
3. rank 0: if the save is still within `persist_timeout_s`, the commit marker
   (`layout.Layout.commit`), a ``committed`` event, then pruning to the newest `keep`.
   A failed or late attempt is removed instead (freeing space on a full disk).

Nothing here raises out of the thread: every failure becomes a `SaveFailed` handed to
`on_error` (the facade's `last_error`) and a ``failed`` event. A dead peer turns into a failed save after the
persist group's timeout.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.storage import StorageWriter

from vigil.recovery.checkpoint.coordination import Topology
from vigil.recovery.checkpoint.errors import CoordinationFailed, PersistTimeout, SaveFailed, StorageFailed
from vigil.recovery.checkpoint.events import EventLog
from vigil.recovery.checkpoint.layout import Commit, Layout
from vigil.recovery.checkpoint.staging import Staged

log = logging.getLogger("vigil.recovery.checkpoint")


@dataclass(kw_only=True)
class Job:
    step: int
    name: str
    path: str
    staged: Staged
    started: float  # time.monotonic() when `save` was called
    deadline: float | None  # time.monotonic() after which the attempt is not committed
    timeout_reported: bool = field(default=False)


def describe(exc: BaseException) -> str:
    """One line per failing rank, without DCP's tracebacks."""
    if isinstance(exc, CheckpointException):
        parts = [f"rank {r}: {type(e).__name__}: {e}" for r, (e, _) in sorted(exc.failures.items())]
        return "; ".join(parts) or "CheckpointException"
    return f"{type(exc).__name__}: {exc}"


def classify(exc: BaseException) -> SaveFailed:
    """The `SaveFailed` a persist exception stands for."""
    if isinstance(exc, CheckpointException | OSError):
        return StorageFailed(describe(exc))
    return CoordinationFailed(describe(exc))  # gloo timeouts, a peer that went away


def written_bytes(metadata: Any, rank: int) -> tuple[int, int]:
    """(bytes this rank wrote, bytes of the whole checkpoint) from DCP's metadata."""
    mine = total = 0
    for info in (getattr(metadata, "storage_data", None) or {}).values():
        length = int(getattr(info, "length", 0) or 0)
        total += length
        if str(getattr(info, "relative_path", "")).startswith(f"__{rank}_"):
            mine += length
    return mine, total


class Persister:
    def __init__(
        self,
        *,
        topology: Topology,
        layout: Layout,
        writer_factory: Callable[[str], StorageWriter],
        keep: int | None,
        events: EventLog,
        on_error: Callable[[SaveFailed], None],
    ) -> None:
        self.topology, self.layout, self.events = topology, layout, events
        self._writer_factory, self._keep, self._on_error = writer_factory, keep, on_error
        self._inbox: queue.Queue[Job | None] = queue.Queue(maxsize=1)
        self._idle = threading.Event()
        self._idle.set()
        self._lock = threading.Lock()
        self.current: Job | None = None
        self.persisted = self.committed = self.failed = 0
        self.last_commit: Commit | None = None
        self._thread = threading.Thread(target=self._run, name="vigil-ckpt-persist", daemon=True)
        self._thread.start()

    # ---- training-thread side --------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return not self._idle.is_set()

    def wait_idle(self, timeout: float | None) -> bool:
        return self._idle.wait(timeout)

    def submit(self, job: Job) -> None:
        """Hand over one job; the caller made sure the persister is idle."""
        with self._lock:
            self._idle.clear()
            self.current = job
        self._inbox.put_nowait(job)

    def close(self, timeout: float | None) -> bool:
        """Wait (bounded) for the job in flight, then stop the thread; True when it was idle."""
        idle = self._idle.wait(timeout)
        try:
            self._inbox.put_nowait(None)
        except queue.Full:
            pass
        if idle:
            self._thread.join(timeout)
        return idle

    # ---- persister thread ------------------------------------------------------------------
    def _run(self) -> None:
        while True:
            job = self._inbox.get()
            if job is None:
                return
            try:
                self._persist(job)
            except BaseException as exc:  # a bug here must not kill the thread and wedge every later save
                self._fail(job, CoordinationFailed(f"internal error: {describe(exc)}"))
            finally:
                with self._lock:
                    self.current = None
                self._idle.set()

    def _persist(self, job: Job) -> None:
        topo = self.topology
        try:
            metadata = dcp_save(
                job.staged.state_dict,
                storage_writer=self._writer_factory(job.path),
                process_group=topo.persist_pg,
                no_dist=not topo.distributed,
            )
        except (Exception, CheckpointException) as exc:
            err = classify(exc)
            free = self.layout.store.free_bytes() if isinstance(err, StorageFailed) else None
            if free is not None and free < job.staged.nbytes:  # torch.save's zip writer hides ENOSPC
                err = StorageFailed(f"{err}; {free} bytes free under {self.layout.store.root}")
            self._fail(job, err)
            if topo.rank == 0:
                self.layout.discard(job.name)
            return
        mine, total = written_bytes(metadata, topo.rank)
        self.persisted += 1
        self.events.emit("persisted", step=job.step, path=job.path, duration_ms=self._ms(job), nbytes=mine)
        if topo.rank != 0:
            return
        if job.deadline is not None and time.monotonic() > job.deadline:
            self._fail(job, PersistTimeout(f"persisting took {self._ms(job) / 1e3:.1f} s; not committed"))
            self.layout.discard(job.name)
            return
        try:
            commit = self.layout.commit(job.name, world_size=topo.world_size, nbytes=total)
        except (OSError, ValueError) as exc:
            self._fail(job, StorageFailed(f"commit marker: {describe(exc)}"))
            self.layout.discard(job.name)
            return
        self.committed += 1
        self.last_commit = commit
        self.events.emit("committed", step=job.step, path=job.path, duration_ms=self._ms(job), nbytes=total)
        removed = self.layout.prune(self._keep, protect=job.name)
        if removed:
            log.debug("checkpoint: pruned %s", removed)

    def _fail(self, job: Job, err: SaveFailed) -> None:
        if isinstance(err, PersistTimeout) and job.timeout_reported:
            return  # the facade already counted and reported this save while it was running late
        self.failed += 1
        self._on_error(err)
        log.warning("checkpoint of step %d failed: %s", job.step, err)
        self.events.emit("failed", step=job.step, path=job.path, duration_ms=self._ms(job), error=_line(err))

    @staticmethod
    def _ms(job: Job) -> float:
        return (time.monotonic() - job.started) * 1e3


def _line(err: SaveFailed) -> str:
    return f"{type(err).__name__}: {err}"
