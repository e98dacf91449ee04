"""Who is timing: job, host, rank and the rank's place in the 3D-parallel layout.

Everything here is resolved once, when the first step record is emitted (by then
`torch.distributed` and Megatron's `parallel_state` are initialised), in this order:

* job id: argument, else `VIGIL_JOB_ID`, else ``"default"``;
* host: argument, else `VIGIL_HOST`, else `socket.gethostname()`;
* rank / world size: argument, else `torch.distributed` when initialised, else the
  torchrun variables `RANK` / `WORLD_SIZE`, else 0 / 1; local rank: argument, else
  `LOCAL_RANK`, else 0;
* coordinates: argument, else Megatron `parallel_state` when the training process has
  imported and initialised it, else derived from the rank with `VIGIL_TP` / `VIGIL_PP`
  (Megatron's order: tp varies fastest, then dp, then pp), else ``dp=rank, tp=pp=0``.

Nothing here imports more than the standard library and (lazily) torch.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

COORD_KEYS = ("dp", "tp", "pp")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Identity:
    """The envelope fields every step record of this process carries."""

    job_id: str
    host: str
    rank: int
    local_rank: int
    world_size: int
    coords: dict[str, int] = field(default_factory=lambda: {"dp": 0, "tp": 0, "pp": 0})


def safe_name(value: str) -> str:
    """`value` made safe as one path component (used for spool file names only)."""
    cleaned = _UNSAFE.sub("_", value).strip(".")
    return cleaned[:128] or "_"


def _env_int(name: str, minimum: int) -> int | None:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = int(raw)
    except ValueError:
        warnings.warn(f"timer: ignoring {name}={raw!r} (not an integer)", RuntimeWarning, stacklevel=3)
        return None
    if value < minimum:
        warnings.warn(f"timer: ignoring {name}={raw!r} (below {minimum})", RuntimeWarning, stacklevel=3)
        return None
    return value


def _dist_rank_world() -> tuple[int, int] | None:
    """Global rank and world size from an initialised default process group, if any."""
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:  # a broken or half-torn-down process group must not break timing
        return None
    return None


def megatron_coords() -> dict[str, int] | None:
    """Coordinates from Megatron-Core's `parallel_state`, when the process uses it.

    Only looks at modules the training process already imported: importing Megatron
    here would be slow and could have side effects.
    """
    ps: Any = sys.modules.get("megatron.core.parallel_state")
    if ps is None:
        return None
    try:
        if not ps.model_parallel_is_initialized():
            return None
        return {
            "dp": int(ps.get_data_parallel_rank()),
            "tp": int(ps.get_tensor_model_parallel_rank()),
            "pp": int(ps.get_pipeline_model_parallel_rank()),
        }
    except Exception:
        return None


def derive_coords(rank: int, world_size: int, tp_size: int, pp_size: int) -> dict[str, int] | None:
    """Megatron's default layout: tp varies fastest, then dp, then pp.

    Returns None when the sizes do not tile the world (the caller falls back).
    """
    if tp_size < 1 or pp_size < 1 or world_size % (tp_size * pp_size) != 0:
        return None
    dp_size = world_size // (tp_size * pp_size)
    return {
        "dp": (rank // tp_size) % dp_size,
        "tp": rank % tp_size,
        "pp": rank // (tp_size * dp_size),
    }


def _explicit_coords(coords: Mapping[str, int]) -> dict[str, int]:
    unknown = set(coords) - set(COORD_KEYS)
    if unknown:
        raise ValueError(f"coords: unknown keys {sorted(unknown)} (expected dp, tp, pp)")
    out = {k: int(coords.get(k, 0)) for k in COORD_KEYS}
    if any(v < 0 for v in out.values()):
        raise ValueError(f"coords must be non-negative, got {out}")
    return out


def resolve_coords(rank: int, world_size: int, explicit: Mapping[str, int] | None) -> dict[str, int]:
    if explicit is not None:
        return _explicit_coords(explicit)
    found = megatron_coords()
    if found is not None:
        return found
    tp, pp = _env_int("VIGIL_TP", 1), _env_int("VIGIL_PP", 1)
    if tp is not None or pp is not None:
        derived = derive_coords(rank, world_size, tp or 1, pp or 1)
        if derived is not None:
            return derived
        warnings.warn(
            f"timer: VIGIL_TP={tp} x VIGIL_PP={pp} does not divide world size {world_size}; using dp=rank",
            RuntimeWarning,
            stacklevel=2,
        )
    return {"dp": rank, "tp": 0, "pp": 0}


def resolve_identity(
    *,
    job_id: str | None,
    host: str | None,
    rank: int | None,
    local_rank: int | None,
    world_size: int | None,
    coords: Mapping[str, int] | None,
) -> Identity:
    """Resolve every field from arguments, the distributed runtime and the environment."""
    job = job_id or os.environ.get("VIGIL_JOB_ID") or "default"
    hostname = host or os.environ.get("VIGIL_HOST") or socket.gethostname() or "localhost"
    dist = _dist_rank_world()
    if rank is None:
        rank = dist[0] if dist else (_env_int("RANK", 0) or 0)
    if world_size is None:
        world_size = dist[1] if dist else (_env_int("WORLD_SIZE", 1) or 1)
    if local_rank is None:
        local_rank = _env_int("LOCAL_RANK", 0) or 0
    if rank < 0 or local_rank < 0 or world_size < 1:
        raise ValueError(f"bad identity: rank={rank} local_rank={local_rank} world_size={world_size}")
    if rank >= world_size:
        warnings.warn(f"timer: rank {rank} >= world size {world_size}", RuntimeWarning, stacklevel=2)
        world_size = rank + 1
    return Identity(
        job_id=job[:256],
        host=hostname[:256],
        rank=rank,
        local_rank=local_rank,
        world_size=world_size,
        coords=resolve_coords(rank, world_size, coords),
    )
