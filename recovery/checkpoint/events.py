"""The ``checkpoint`` events a save emits, and who emits them.

One JSON line per event, for the node agent to ship (the contract's `Checkpoint` model,
kind ``checkpoint``, schema_version 1). Per save:

* every rank: ``staged`` when `save` returned (`blocked_ms`: the whole call, i.e. how long
  training was blocked; `duration_ms`: the copy; `bytes`: this rank's staged bytes), or
  ``skipped`` (the previous save was still persisting) or ``failed`` (nothing was saved);
* every rank: ``persisted`` when its part is written (`duration_ms` from the `save` call,
  `bytes`: what this rank wrote), or ``failed`` with `error`;
* rank 0: ``committed`` when the commit marker is written: the checkpoint is complete and
  `load_latest` can return it (`bytes`: the whole checkpoint), or ``failed``;
* rank 0, at restore: ``failed`` with ``unverified: true`` for each checkpoint whose files do not
  match its commit marker (the controller raises it as a `security` alert).

Identity is the training side's (`vigil.trainside.identity`, as the step timer's): job `VIGIL_JOB_ID` (default
``default``), host `VIGIL_HOST` (default the host name), rank from torch.distributed, else `RANK`, else 0. Lines
go through the training side's spool (`vigil.trainside.spool`, stream ``ckpt``, each written at once) to
``<spool>/<job>/<host>-rank<rank>.ckpt-<seq>.jsonl``. Emitting never blocks and never raises: a failure to build
or queue an event is counted.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from vigil.trainside.env import default_spool_dir
from vigil.trainside.identity import Identity
from vigil.trainside.spool import SpoolWriter
from vigil.trainside.spoolfile import location

Phase = Literal["staged", "persisted", "committed", "failed", "skipped", "restored"]
MAX_ERROR = 2000
STREAM = "ckpt"  # the file infix that keeps these lines apart from the step timer's
EventSpool = SpoolWriter[dict[str, Any]]


def _as_is(record: dict[str, Any]) -> dict[str, Any]:
    return record


class EventLog:
    """Builds checkpoint event records and queues them on a spool (or nowhere, when disabled)."""

    def __init__(self, identity: Identity, spool: EventSpool | None) -> None:
        self.identity, self.spool = identity, spool
        self.failed_to_build = 0

    @classmethod
    def open(
        cls, identity: Identity, spool_dir: Path | None, *, enabled: bool, max_bytes: int, keep_files: int
    ) -> EventLog:
        if not enabled:
            return cls(identity, None)
        directory, stem = location(spool_dir or default_spool_dir(), identity)
        spool: EventSpool = SpoolWriter(directory, stem, _as_is, stream=STREAM, name="checkpoint",
                                        what="checkpoint events", max_bytes=max_bytes, keep_files=keep_files,
                                        queue_size=1024, flush_interval_s=0, retry_s=0)  # fmt: skip
        return cls(identity, spool)

    def emit(
        self,
        phase: Phase,
        *,
        step: int,
        path: str = "",
        blocked_ms: float = 0.0,
        duration_ms: float = 0.0,
        nbytes: int = 0,
        error: str = "",
        source: str = "",
        unverified: bool = False,
    ) -> None:
        if self.spool is None:
            return
        try:
            record = {
                "kind": "checkpoint", "schema_version": 1, "event_id": uuid.uuid4().hex,
                "job_id": self.identity.job_id, "host": self.identity.host,
                "ts": datetime.now(UTC).isoformat(timespec="microseconds"),
                "rank": self.identity.rank, "step": max(0, int(step)), "phase": phase, "path": str(path),
                "blocked_ms": round(max(0.0, blocked_ms), 3), "duration_ms": round(max(0.0, duration_ms), 3),
                "bytes": max(0, int(nbytes)), "error": error[:MAX_ERROR],
            }  # fmt: skip
            if source:
                record["source"] = source
            if unverified:
                record["unverified"] = True
        except Exception:  # a value that does not convert: count, never raise into training
            self.failed_to_build += 1
            return
        self.spool.put(record)

    @property
    def dropped(self) -> int:
        return self.failed_to_build + (self.spool.dropped if self.spool is not None else 0)

    def flush(self, timeout: float = 5.0) -> bool:
        return self.spool.flush(timeout) if self.spool is not None else True

    def close(self, timeout: float = 5.0) -> None:
        if self.spool is not None:
            self.spool.close(timeout)
