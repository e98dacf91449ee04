"""Who this process is: job, host, rank, local rank and world size, resolved by one rule for the whole training side.

Each field, in this order (the first that is set wins):

* job id: argument, else `VIGIL_JOB_ID`, else ``"default"``;
* host: argument, else `VIGIL_HOST`, else the caller's `fallback_host`, else `socket.gethostname()`;
* rank / world size: argument, else torch.distributed's default process group when it is initialised, else the
  torchrun variables `RANK` / `WORLD_SIZE`, else 0 / 1; local rank: argument, else `LOCAL_RANK`, else 0.

torch.distributed is never imported here: `dist_rank_world` looks only at a ``torch.distributed`` the process has
already imported (a process group cannot be initialised otherwise), so this leaf stays torch-free, costs a process
that never uses torch nothing, and a broken or half-torn-down group falls back to the environment. Malformed
environment values are ignored with a warning; a bad argument is a `ValueError` (the caller's mistake).
"""

from __future__ import annotations

import re
import socket
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from vigil.trainside import env

MAX_NAME = 256  # job ids and host names are cut to this many characters
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, kw_only=True)
class Identity:
    """Who writes a record: what every training-side line carries in its envelope."""

    job_id: str
    host: str
    rank: int
    local_rank: int = 0
    world_size: int = 1


def safe_name(value: str) -> str:
    """`value` made safe as one path component (file and directory names only; records keep the real value)."""
    return _UNSAFE.sub("_", value).strip(".")[:128] or "_"


def dist_rank_world() -> tuple[int, int] | None:
    """(rank, world size) of torch.distributed's initialised default group, if this process has one."""
    dist: Any = sys.modules.get("torch.distributed")
    if dist is None:
        return None
    try:
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a broken process group must not break the caller
        return None
    return None


def resolve_job(explicit: str | None = None) -> str:
    """The job id: `explicit`, else `VIGIL_JOB_ID`, else ``default``."""
    return (explicit or env.text(env.JOB_ID) or "default")[:MAX_NAME]


def resolve_host(explicit: str | None = None, fallback: str | None = None) -> str:
    """The host: `explicit`, else `VIGIL_HOST`, else `fallback`, else the host name."""
    return (explicit or env.text(env.HOST) or fallback or socket.gethostname() or "localhost")[:MAX_NAME]


def resolve_rank(explicit: int | None = None) -> int:
    """The global rank alone: `explicit`, else torch.distributed's, else `RANK`, else 0."""
    if explicit is not None:
        return explicit
    dist = dist_rank_world()
    return dist[0] if dist else (env.integer(env.RANK, 0) or 0)


def resolve_identity(
    *,
    job_id: str | None = None,
    host: str | None = None,
    rank: int | None = None,
    local_rank: int | None = None,
    world_size: int | None = None,
    fallback_host: str | None = None,
) -> Identity:
    """Every field from the arguments, torch.distributed and the environment (see the module docstring)."""
    dist = dist_rank_world() if rank is None or world_size is None else None
    if rank is None:
        rank = dist[0] if dist else (env.integer(env.RANK, 0) or 0)
    if world_size is None:
        world_size = dist[1] if dist else (env.integer(env.WORLD_SIZE, 1) or 1)
    if local_rank is None:
        local_rank = env.integer(env.LOCAL_RANK, 0) or 0
    if rank < 0 or local_rank < 0 or world_size < 1:
        raise ValueError(f"bad identity: rank={rank} local_rank={local_rank} world_size={world_size}")
    if rank >= world_size:
        warnings.warn(f"vigil: rank {rank} >= world size {world_size}", RuntimeWarning, stacklevel=2)
        world_size = rank + 1
    return Identity(job_id=resolve_job(job_id), host=resolve_host(host, fallback_host), rank=rank, local_rank=local_rank,
                    world_size=world_size)

