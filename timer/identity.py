"""Who is timing: job, host, rank (the training side's one rule, `vigil.trainside.identity`) and the rank's place
in the 3D-parallel layout.

Everything here is resolved once, when the first step record is emitted (by then `torch.distributed` and
Megatron's `parallel_state` are initialised). Job, host, rank, local rank and world size follow
`vigil.trainside.identity.resolve_identity` (argument, then torch.distributed, then `VIGIL_JOB_ID` / `VIGIL_HOST`
/ the torchrun variables). The coordinates: argument, else Megatron `parallel_state` when the training process has
imported and initialised it, else derived from the rank with `VIGIL_TP` / `VIGIL_PP` (Megatron's order: tp varies
fastest, then dp, then pp), else ``dp=rank, tp=pp=0``.

Nothing here imports more than the standard library.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vigil.trainside import env, identity

COORD_KEYS = ("dp", "tp", "pp")


@dataclass(frozen=True, kw_only=True)
class Identity(identity.Identity):
    """The envelope fields every step record of this process carries: who, and where in the parallel layout."""

    coords: dict[str, int] = field(default_factory=lambda: {"dp": 0, "tp": 0, "pp": 0})


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
    tp, pp = env.integer(env.TP, 1), env.integer(env.PP, 1)
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
    who = identity.resolve_identity(job_id=job_id, host=host, rank=rank, local_rank=local_rank, world_size=world_size)
    return Identity(
        job_id=who.job_id,
        host=who.host,
        rank=who.rank,
        local_rank=who.local_rank,
        world_size=who.world_size,
        coords=resolve_coords(who.rank, who.world_size, coords),
    )
