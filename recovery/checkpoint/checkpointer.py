"""`Checkpointer`: two-phase checkpointing for a training loop, and restore.

    ckpt = Checkpointer(CheckpointConfig(directory="/shared/ckpt/run1", dp_group="world"))
    state = {"train": TrainState(model, optimizer)}
    start = (ckpt.load_latest(state) or 0) + 1
    for step in range(start, steps + 1):
        train_step()
        if step % 10 == 0:
            ckpt.save(step, state)          # returns once the state is in host memory
    ckpt.close()                            # waits for the last save to be committed

`save(step, state)` (every rank, same step) never raises and blocks only for:

1. the previous save, if it is still persisting: up to `busy_timeout_s` with
   ``on_busy="wait"``, not at all with ``"skip"``; then the save is skipped (counted,
   a ``skipped`` event);
2. staging: the state is copied into reused host buffers (pinned ones from CUDA);
3. one small gloo all-gather so that every rank saves, or every rank skips, together:
   all idle and staged, and the same step. Rank 0's random token names the attempt.

It then returns True and the persister thread writes the copy, commits it (rank 0,
marker written last) and prunes old checkpoints. Failures (full or unwritable storage,
a peer's failed write, persisting past `persist_timeout_s`) are ``failed`` events and
`last_error`, never exceptions in training. `load_latest(state)` restores the committed
checkpoint of the highest step whose files match its marker's sha256 digests, with one
storage reader per data-parallel group (see `restore`); each one refused on the way is a
``failed`` event (``IntegrityError: ...``), never a silent fallback.
"""

from __future__ import annotations

import atexit
import logging
import time
from collections.abc import Mapping, MutableMapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from torch.distributed.checkpoint.storage import StorageReader, StorageWriter

from vigil.recovery.checkpoint.config import CheckpointConfig
from vigil.recovery.checkpoint.coordination import BUSY, NOT_STAGED, READY, Agreement, build_topology
from vigil.recovery.checkpoint.errors import (
    CoordinationFailed,
    PersistTimeout,
    RestoreError,
    SaveFailed,
    StagingFailed,
)
from vigil.recovery.checkpoint.events import EventLog
from vigil.recovery.checkpoint.integrity import job_key
from vigil.recovery.checkpoint.layout import Commit, Layout, dir_name
from vigil.recovery.checkpoint.memory import Snapshots, assign, choose
from vigil.recovery.checkpoint.persist import Job, Persister, describe
from vigil.recovery.checkpoint.restore import RestoreReport, load_latest
from vigil.recovery.checkpoint.snapshot import PEER, default_snapshot_dir
from vigil.recovery.checkpoint.staging import Staged, Stager
from vigil.recovery.checkpoint.stores import default_reader, default_writer, open_store
from vigil.trainside import env
from vigil.trainside.identity import resolve_identity

log = logging.getLogger("vigil.recovery.checkpoint")


@dataclass(frozen=True, kw_only=True)
class Stats:
    """Counters of this rank's checkpointer since it was built."""

    requested: int  # save() calls
    staged: int  # saves handed to the persister
    skipped: int  # saves skipped because a previous one was still persisting
    failed: int  # saves that failed, before or while persisting
    persisted: int  # this rank's part written
    committed: int  # checkpoints committed (rank 0 only)
    events_dropped: int
    last_blocked_s: float  # how long the last save() blocked the caller
    last_copy_s: float  # of which the copy to host memory (the rest: waiting for peers or a busy save)
    snapshots: int = 0  # in-memory snapshots handed to the snapshot writer
    snapshots_written: int = 0
    snapshots_skipped: int = 0  # the previous snapshot was still being written
    snapshots_failed: int = 0
    snapshot_every: int = 1  # the interval in use (chosen at the last save under snapshot_budget)


class Checkpointer:
    """Two-phase checkpoints of a training job; see the module docstring."""

    def __init__(self, config: CheckpointConfig) -> None:
        self.config = config
        self.topology = build_topology(config.dp_group, config.collective_timeout_s)
        self.layout = Layout(open_store(config.directory), key=job_key())
        identity = resolve_identity(job_id=config.job_id, host=config.host)
        spool_dir = Path(config.spool_dir).expanduser() if config.spool_dir is not None else None
        self.events = EventLog.open(
            identity,
            spool_dir,
            enabled=config.events,
            max_bytes=config.event_file_bytes,
            keep_files=config.event_files,
        )
        self._stager = Stager(pin_memory=config.pin_memory)
        self._last_error: SaveFailed | None = None
        self._persister = Persister(
            topology=self.topology, layout=self.layout, writer_factory=self._writer, keep=config.keep,
            events=self.events, on_error=self._set_error,
        )  # fmt: skip
        self._requested = self._staged = self._skipped = self._failed = 0
        self._last_blocked_s = self._last_copy_s = 0.0
        self.last_restore: RestoreReport | None = None
        base = (Path(config.snapshot_dir).expanduser() if config.snapshot_dir is not None
                else default_snapshot_dir(identity.job_id))  # fmt: skip
        rank = str(self.topology.rank)
        self.snapshots = Snapshots(base / rank, topology=self.topology, every=config.snapshot_every,
                                   keep=config.snapshot_keep, pin_memory=config.pin_memory,
                                   wait_s=config.snapshot_wait_s, peer_root=base / PEER / rank,
                                   replicated=self.topology.world_size > 1 and self.topology.dp_pg is not None
                                   and len(self.topology.dp_ranks) == self.topology.world_size)  # fmt: skip
        self._closed = False
        atexit.register(self._atexit)

    # ---- saving ------------------------------------------------------------------------------
    def snapshot(self, step: int, state: Mapping[str, Any]) -> bool:
        """An in-memory snapshot of `state` at `step` when it is due: every `snapshot_every` steps, or
        the interval the ranks chose at the last `save` under `snapshot_budget` (see the config).

        Rank-local, no collective: call it every step on every rank. Blocks for the copy into
        host buffers (while the previous snapshot is still being written it waits up to
        `snapshot_wait_s`, default 0, then skips); the write happens on a thread. Never raises.
        """
        if self._closed:
            return False
        try:
            return self.snapshots.take(step, state)
        except Exception as exc:  # a bug must not take the training down
            log.warning("snapshot of step %s failed: %s", step, describe(exc))
            return False

    def save(self, step: int, state: Mapping[str, Any]) -> bool:
        """Stage `state` and persist it in the background; True when handed to the persister.

        Every rank must call it with the same `step`. Never raises (except KeyboardInterrupt
        and the like); see the module docstring for what it may wait for.
        """
        t0 = time.monotonic()
        self._requested += 1
        try:
            return self._save(step, state, t0)
        except Exception as exc:  # a bug must not take the training down
            return self._refuse("failed", step, t0, CoordinationFailed(f"internal error: {describe(exc)}"))
        finally:
            self._last_blocked_s = time.monotonic() - t0

    def _save(self, step: int, state: Mapping[str, Any], t0: float) -> bool:
        if self._closed:
            return self._refuse("failed", 0, t0, CoordinationFailed("save() after close()"))
        self._report_overdue()
        status, staged = BUSY, None
        stage_error: SaveFailed | None = None
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            # still take part in the agreement below: the other ranks must not wait for this one
            stage_error = CoordinationFailed(f"step must be an integer >= 0, got {step!r}")
            status, step = NOT_STAGED, -1
        elif self._persister.wait_idle(0 if self.config.on_busy == "skip" else self.config.busy_timeout_s):
            try:
                staged, status = self._stager.stage(state), READY
            except Exception as exc:
                stage_error, status = StagingFailed(describe(exc)), NOT_STAGED
        try:
            every = self.snapshots.proposal(self.config.snapshot_budget)
        except Exception as exc:  # a bug must not keep this rank out of the all-gather the others are in
            log.warning("snapshot interval: %s", describe(exc))
            every = self.snapshots.every
        try:
            agreement = self.topology.agree(step, status, every)
        except Exception as exc:
            return self._refuse("failed", step, t0, CoordinationFailed(f"save agreement: {describe(exc)}"))
        self._set_snapshot_every(agreement.snapshot_every)
        if not agreement.go or staged is None:
            return self._refuse_agreement(max(step, 0), t0, agreement, stage_error)
        name = dir_name(step, agreement.token)
        deadline = t0 + self.config.persist_timeout_s if self.config.persist_timeout_s is not None else None
        job = Job(
            step=step, name=name, path=self.layout.path(name), staged=staged, started=t0, deadline=deadline
        )
        self._persister.submit(job)
        self._staged += 1
        self._last_copy_s = staged.seconds
        self._emit_staged(job, staged, t0)
        return True

    def _set_snapshot_every(self, every: int) -> None:
        """Every rank got the same `every` from the agreement: snapshots stay on common steps."""
        every = max(self.snapshots.floor, every)
        if every != self.snapshots.every:
            log.info("snapshots every %d step(s) from now (was %d): the measured copy, write and step times "
                     "under snapshot_budget %s", every, self.snapshots.every, self.config.snapshot_budget)
            self.snapshots.every = every

    def _emit_staged(self, job: Job, staged: Staged, t0: float) -> None:
        blocked_ms = (time.monotonic() - t0) * 1e3
        self.events.emit("staged", step=job.step, path=job.path, blocked_ms=blocked_ms,
                         duration_ms=staged.seconds * 1e3, nbytes=staged.nbytes)  # fmt: skip

    def _refuse_agreement(
        self, step: int, t0: float, agreement: Agreement, stage_error: SaveFailed | None
    ) -> bool:
        statuses = agreement.statuses
        if stage_error is not None:
            return self._refuse("failed", step, t0, stage_error)
        if NOT_STAGED in statuses:
            ranks = [r for r, s in enumerate(statuses) if s == NOT_STAGED]
            return self._refuse(
                "failed", step, t0, CoordinationFailed(f"rank(s) {ranks} could not stage the state")
            )
        if len(set(agreement.steps)) > 1:
            steps = sorted(set(agreement.steps))
            return self._refuse(
                "failed", step, t0, CoordinationFailed(f"ranks asked to save different steps {steps}")
            )
        ranks = [r for r, s in enumerate(statuses) if s == BUSY]
        return self._refuse("skipped", step, t0, None, f"previous save still persisting on rank(s) {ranks}")

    def _refuse(self, phase: str, step: int, t0: float, err: SaveFailed | None, reason: str = "") -> bool:
        blocked_ms = (time.monotonic() - t0) * 1e3
        if phase == "skipped":
            self._skipped += 1
            log.info("checkpoint of step %d skipped: %s", step, reason)
            self.events.emit("skipped", step=step, blocked_ms=blocked_ms, error=reason)
            return False
        assert err is not None
        self._failed += 1
        self._set_error(err)
        log.warning("checkpoint of step %d failed: %s", step, err)
        self.events.emit("failed", step=step, blocked_ms=blocked_ms, error=f"{type(err).__name__}: {err}")
        return False

    def _report_overdue(self) -> None:
        """A save persisting past `persist_timeout_s` is reported failed now (it will not commit)."""
        job = self._persister.current
        if job is None or job.deadline is None or job.timeout_reported or time.monotonic() <= job.deadline:
            return
        job.timeout_reported = True
        self._failed += 1
        err = PersistTimeout(
            f"still persisting after {time.monotonic() - job.started:.1f} s "
            f"(persist_timeout_s={self.config.persist_timeout_s}); it will not be committed"
        )
        self._set_error(err)
        self.events.emit("failed", step=job.step, path=job.path, duration_ms=(time.monotonic() - job.started) * 1e3,
                         error=f"{type(err).__name__}: {err}")  # fmt: skip

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the save in flight (if any) is persisted and, on rank 0, committed."""
        return self._persister.wait_idle(timeout)

    # ---- restoring ---------------------------------------------------------------------------
    def load_latest(self, state: MutableMapping[str, Any], *, at_most: int | None = None) -> int | None:
        """Load the freshest state every rank can obtain into `state` in place; its step, or None.

        Collective (every rank, same point). One all-gather of what each rank holds decides
        (`memory.choose`): the newest in-memory snapshot step every rank can load — its own, or
        the copy of its rank that the node agent holds in the host's peer directory — when it is
        at least as new as the newest committed checkpoint, else the highest-step verified
        checkpoint. Raises `RestoreError` when checkpoints exist but none can be loaded (its
        `rejected`: the ones that failed verification). Snapshots newer than the step restored
        are removed. The ``restored`` event names the `source` (memory, peer, persisted).

        `at_most` (default: ``VIGIL_RESTORE_MAX_STEP``, set by the agent when the controller rolls the job back
        from a silent data corruption): nothing newer than this step is restored, snapshot or checkpoint, and
        rank 0 removes the committed checkpoints newer than it (a later restart must not restore them).
        """
        if at_most is None:
            at_most = env.integer(env.RESTORE_MAX_STEP, 0)
        if not self._persister.wait_idle(self.config.persist_timeout_s):
            raise RestoreError("a save is still persisting; cannot restore while it runs")
        self.snapshots.wait(self.config.busy_timeout_s)
        t0 = time.monotonic()
        self._report_planted()
        step = self._load_snapshot(state, t0, at_most)
        if step is None:
            step = self._load_persisted(state, at_most)
        self.snapshots.discard_after(step)
        if at_most and self.topology.rank == 0:
            self._retire_after(at_most)
        return step

    def _retire_after(self, bound: int) -> None:
        """A rollback's bound outlives its restore: committed checkpoints newer than it were written after the
        divergence (they may hold the corruption), so a later ordinary restore must not take them: removed."""
        for commit in self.layout.committed():
            if commit.step > bound and self.layout.discard(commit.name):
                log.warning("checkpoint of step %d (newer than the rollback's bound %d) removed", commit.step, bound)

    def _load_snapshot(self, state: MutableMapping[str, Any], t0: float, at_most: int | None) -> int | None:
        newest = self.latest(at_most) if self.topology.rank == 0 else None
        step = choose(self.topology.gather_rows(self.snapshots.row(newest.step if newest else None)), at_most)
        if step is None:
            return None
        found, sd, error = self.snapshots.find(step), None, ""
        try:
            if found is None:
                raise FileNotFoundError(f"snapshot of step {step} is gone")
            sd = found[1].load(found[0])
        except Exception as exc:
            error = describe(exc)
        if not self.topology.all_true(sd is not None):
            log.warning("snapshot of step %d could not be loaded (%s); restoring the persisted checkpoint",
                        step, error or "on a peer")  # fmt: skip
            return None
        assert sd is not None and found is not None
        snap, _, source = found
        assign(state, sd)
        seconds = time.monotonic() - t0
        self.last_restore = RestoreReport(step=step, path=str(snap.path), read_storage=True, seconds=seconds,
                                          source=source)  # fmt: skip
        self.events.emit("restored", step=step, path=str(snap.path), duration_ms=seconds * 1e3, source=source)
        log.info("restored step %d from the in-memory snapshot %s (%s)", step, snap.path, source)
        return step

    def _load_persisted(self, state: MutableMapping[str, Any], at_most: int | None) -> int | None:
        if self.topology.rank == 0:  # planted (a marker without the job's key): never read, reported, pruned later
            self._report_rejected(tuple((step, self.layout.path(name), f"{name}: commit marker not made with the "
                                         "job's integrity key") for step, name in self.layout.forged()))
        try:
            report = load_latest(state, topology=self.topology, layout=self.layout, reader_factory=self._reader,
                                 at_most=at_most)
        except RestoreError as exc:
            self._report_rejected(exc.rejected)
            raise
        self.last_restore = report
        if report is not None:
            self._report_rejected(report.rejected)
        if report is not None:
            self.events.emit("restored", step=report.step, path=report.path, duration_ms=report.seconds * 1e3,
                             source="persisted")  # fmt: skip
            log.info("restored step %d from %s (%s)", report.step, report.path,
                     "read from storage" if report.read_storage else "received from the DP group's reader")  # fmt: skip
        return report.step if report is not None else None

    def _report_planted(self) -> None:
        """A snapshot planted in this rank's folders (a marker without the job's key) is a ``failed``
        `unverified` event of this rank, as a planted checkpoint is rank 0's: one security alert per host."""
        planted = self.snapshots.planted()
        for snap in planted:
            self.events.emit("failed", step=snap.step, path=str(snap.path), unverified=True,
                             error=f"IntegrityError: {snap.path.name}: snapshot marker not made with the job's "
                                   "integrity key")  # fmt: skip
        if planted:
            self.events.flush()

    def _report_rejected(self, rejected: tuple[tuple[int, str, str], ...]) -> None:
        """A checkpoint that failed verification is a ``failed`` event (rank 0, which verified), never silent."""
        if self.topology.rank == 0:
            for step, path, why in rejected:
                self.events.emit("failed", step=step, path=path, error=f"IntegrityError: {why}", unverified=True)
            if rejected:
                self.events.flush()

    def latest(self, at_most: int | None = None) -> Commit | None:
        """The newest complete checkpoint (at or below `at_most`) as this rank sees the directory (no collective)."""
        committed = [c for c in self.layout.committed() if at_most is None or c.step <= at_most]
        return committed[0] if committed else None

    # ---- state -------------------------------------------------------------------------------
    @property
    def last_error(self) -> SaveFailed | None:
        """The most recent save failure (staging, agreement, persisting or committing)."""
        return self._last_error

    def _set_error(self, err: SaveFailed) -> None:
        self._last_error = err

    def stats(self) -> Stats:
        p = self._persister
        return Stats(
            requested=self._requested, staged=self._staged, skipped=self._skipped, failed=self._failed + p.failed,
            persisted=p.persisted, committed=p.committed, events_dropped=self.events.dropped,
            last_blocked_s=self._last_blocked_s, last_copy_s=self._last_copy_s, snapshots=self.snapshots.taken,
            snapshots_written=self.snapshots.written, snapshots_skipped=self.snapshots.skipped,
            snapshots_failed=self.snapshots.failed, snapshot_every=self.snapshots.every,
        )  # fmt: skip

    def close(self, timeout: float | None = None) -> bool:
        """Wait for the save in flight (default: up to `persist_timeout_s`), then stop.

        Call it before `destroy_process_group`: persisting needs the process group.
        Returns False when a save was still persisting after `timeout`. Idempotent.
        """
        if self._closed:
            return True
        self._closed = True
        atexit.unregister(self._atexit)
        idle = self._persister.close(self.config.persist_timeout_s if timeout is None else timeout)
        self.snapshots.close(self.config.busy_timeout_s if timeout is None else timeout)
        if idle:
            self._stager.close()
        self.events.close()
        return idle

    def _atexit(self) -> None:
        self.close(self.config.exit_timeout_s)

    def __enter__(self) -> Checkpointer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ---- storage ----------------------------------------------------------------------------
    def _writer(self, path: str) -> StorageWriter:
        cfg = self.config
        if cfg.storage_writer_factory is not None:
            return cfg.storage_writer_factory(path)
        return default_writer(path, sync_files=cfg.sync_files, threads=cfg.writer_threads)

    def _reader(self, path: str) -> StorageReader:
        factory = self.config.storage_reader_factory
        return factory(path) if factory is not None else default_reader(path)
