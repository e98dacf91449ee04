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

Identity follows the step timer: job `VIGIL_JOB_ID` (default ``default``), host
`VIGIL_HOST` (default the host name), rank from torch.distributed, else `RANK`, else 0.
Lines go to ``<spool>/<job>/<host>-rank<rank>.ckpt-<seq>.jsonl`` (see `spool`). Emitting
never blocks and never raises: a failure to build or queue an event is counted.
"""

from __future__ import annotations

import os
import re
import socket
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import torch.distributed as dist

from vigil.recovery.checkpoint.spool import EventSpool

Phase = Literal["staged", "persisted", "committed", "failed", "skipped", "restored"]
MAX_ERROR = 2000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, kw_only=True)
class Identity:
    job_id: str
    host: str
    rank: int


def resolve_identity(*, job_id: str | None = None, host: str | None = None) -> Identity:
    job = job_id or os.environ.get("VIGIL_JOB_ID") or "default"
    hostname = host or os.environ.get("VIGIL_HOST") or socket.gethostname() or "localhost"
    if dist.is_available() and dist.is_initialized():
        rank = dist.get_rank()
    else:
        raw = os.environ.get("RANK", "0").strip()
        rank = int(raw) if raw.isdigit() else 0
    return Identity(job_id=job[:256], host=hostname[:256], rank=rank)


def default_spool_dir() -> Path:
    """`VIGIL_SPOOL_DIR`, else ``$VIGIL_HOME/spool`` (``VIGIL_HOME`` defaults to ``~/.vigil``)."""
    explicit = os.environ.get("VIGIL_SPOOL_DIR")
    if explicit:
        return Path(explicit).expanduser()
    return Path(os.environ.get("VIGIL_HOME") or "~/.vigil").expanduser() / "spool"


def safe_name(value: str) -> str:
    """`value` made safe as one path component (for file names only)."""
    return _UNSAFE.sub("_", value).strip(".")[:128] or "_"


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
        directory = (spool_dir or default_spool_dir()) / safe_name(identity.job_id)
        stem = f"{safe_name(identity.host)}-rank{identity.rank}"
        return cls(identity, EventSpool(directory, stem, max_bytes=max_bytes, keep_files=keep_files))

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
