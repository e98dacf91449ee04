"""Phase kinds: which timed phases are work and which are communication or waiting.

In synchronous training every rank ends a step together, so the ranks that wait for a
slow peer show *longer* communication phases (the all-reduce blocks until the slow rank
arrives) and the slow rank shows a *shorter* one. A phase's kind says how to read it:

    compute   work the rank does itself (forward, backward, optimizer, data): a longer
              one on one rank is that rank's slowness
    comm      communication, including the time spent waiting for peers inside it
              (grad_sync, all_reduce, p2p, ...): longer on the ranks that wait
    wait      pure waiting (pipeline bubble, barrier): longer on the ranks that wait

A producer declares kinds (`StepTimer.phase(name, kind=...)` -> `StepTiming.phase_kinds`,
or job-wide in `JobRegistered.phase_kinds`); a phase nobody declared gets the default by
its name (`default_phase_kind`), judged on the last path segment of a nested phase
(`backward/allreduce` -> `allreduce` -> comm). `resolve` applies that order: the step's
own declaration, then the job's, then the name. Pure functions, used alike by the
analyzer (stragglers are judged on compute only), the dashboard and the simulator.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Literal, get_args

PhaseKind = Literal["compute", "comm", "wait"]
PHASE_KINDS: tuple[str, ...] = get_args(PhaseKind)
WAITING: frozenset[str] = frozenset({"comm", "wait"})
"""Kinds whose time grows on the ranks that wait for a slow peer."""

_COMM_NAMES = frozenset({
    "comm", "communication", "grad_sync", "gradsync", "sync", "all_reduce", "allreduce", "all_gather", "allgather",
    "reduce_scatter", "reducescatter", "all_to_all", "alltoall", "broadcast", "reduce", "p2p", "send", "recv",
    "send_recv", "sendrecv", "collective", "collectives", "nccl", "dp_comm", "tp_comm", "pp_comm", "ep_comm",
})
_COMM_TOKENS = frozenset({"comm", "allreduce", "allgather", "reducescatter", "alltoall", "nccl", "p2p", "collective"})
_WAIT_NAMES = frozenset({"bubble", "pipeline_bubble", "pp_bubble", "barrier", "idle"})
_SPLIT = re.compile(r"[^a-z0-9]+")


def default_phase_kind(name: str) -> PhaseKind:
    """The kind a phase gets by its name when nobody declared one (compute unless it names comm/waiting)."""
    leaf = name.rsplit("/", 1)[-1].strip().lower()
    norm = _SPLIT.sub("_", leaf).strip("_")
    if norm in _WAIT_NAMES or "bubble" in norm.split("_"):
        return "wait"
    tokens = set(norm.split("_"))
    if norm in _COMM_NAMES or tokens & _COMM_TOKENS or norm.endswith("_sync"):
        return "comm"
    return "compute"


def resolve(phases: Iterable[str], *declared: Mapping[str, str]) -> dict[str, PhaseKind]:
    """Each phase's kind: the first declaration (in the order given) that names it, else its default."""
    out: dict[str, PhaseKind] = {}
    for p in phases:
        kind: PhaseKind | None = None
        for d in declared:
            k = d.get(p)
            if k in PHASE_KINDS:
                kind = k  # type: ignore[assignment]
                break
        out[p] = kind if kind is not None else default_phase_kind(p)
    return out


def is_waiting(kind: str) -> bool:
    return kind in WAITING


def parent(phase: str) -> str | None:
    """`backward/allreduce` -> `backward`; a top-level phase has no parent."""
    head, sep, _ = phase.rpartition("/")
    return head if sep else None
