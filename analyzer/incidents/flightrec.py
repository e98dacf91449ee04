"""Flight Recorder dumps as the hang matcher reads them: per process group, the newest few collectives.

A dump holds up to hundreds of entries; matching a hang needs, per process group, only
the highest `collective_seq_id` the rank enqueued and the last few collectives (the
frontier and its neighbours, for op/size comparisons). `tail_of` keeps that (at ingest,
stored as `collective_traces.pg_tail`), so the detector reads a few KB per rank, not the
whole dump. Groups are keyed by the entries' process-group *name* (`process_group[0]`:
"0" is the default group, "1", "2", ... later `new_group`s, the same on every rank);
`pg_id` is a per-process counter and never compared across ranks. Point-to-point entries
are left out (gloo records none; NCCL's p2p sequence is separate). Pure logic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

TAIL = 8  # collectives kept per process group


def freeze(value: Any) -> Any:
    """Lists as tuples (hashable, cheap to compare), recursively."""
    return tuple(freeze(v) for v in value) if isinstance(value, (list, tuple)) else value


def thaw(value: Any) -> Any:
    """`freeze`'s inverse: tuples as lists (as torch prints sizes), recursively."""
    return [thaw(v) for v in value] if isinstance(value, tuple) else value


COMPARED = ("op", "input_sizes", "output_sizes", "dtypes")  # what every member of a collective must agree on
# Rooted collectives: only the root holds the gathered output (gather) or the scattered input
# (scatter, whose input dtypes are the root's too), so only the other side is compared.
ROOTED = {"gather": ("op", "input_sizes", "dtypes"), "scatter": ("op", "output_sizes")}


def compared(op: str) -> tuple[str, ...]:
    """The fields every member of collective `op` ("gloo:gather", "nccl:all_reduce", ...) must agree on."""
    return ROOTED.get(op.rsplit(":", 1)[-1], COMPARED)


@dataclass(frozen=True, kw_only=True)
class Op:
    """One collective as one rank recorded it (sizes and dtypes as tuples)."""

    seq: int
    op: str
    input_sizes: Any
    output_sizes: Any
    dtypes: Any
    retired: bool
    created_ns: int
    timeout_ms: int | None
    sig: int = field(init=False, compare=False, repr=False)  # hash of the compared fields: one compare per op

    def __post_init__(self) -> None:
        for name in ("input_sizes", "output_sizes", "dtypes"):
            object.__setattr__(self, name, freeze(getattr(self, name)))
        object.__setattr__(self, "sig", hash(tuple(getattr(self, f) for f in compared(self.op))))


@dataclass(frozen=True, kw_only=True)
class GroupTail:
    name: str
    desc: str
    last_seq: int  # highest collective_seq_id this rank enqueued in the group (0: none)
    ops: tuple[Op, ...]  # the newest `TAIL`, oldest first
    _by_seq: dict[int, Op] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        self._by_seq.update({o.seq: o for o in self.ops})

    def op(self, seq: int) -> Op | None:
        return self._by_seq.get(seq)


def _int(value: Any, default: int = 0) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def tail_of(entries: Iterable[Mapping[str, Any]], keep: int = TAIL) -> dict[str, GroupTail]:
    """Per process-group name: the last enqueued sequence number and the newest `keep` collectives."""
    by_group: dict[str, list[Op]] = {}
    descs: dict[str, str] = {}
    for e in entries:
        pg = e.get("process_group")
        if not isinstance(pg, (list, tuple)) or not pg or e.get("is_p2p"):
            continue
        name = str(pg[0])
        descs.setdefault(name, str(pg[1]) if len(pg) > 1 else "")
        timeout = e.get("timeout_ms")
        by_group.setdefault(name, []).append(Op(
            seq=_int(e.get("collective_seq_id")), op=str(e.get("profiling_name", "")),
            input_sizes=e.get("input_sizes"), output_sizes=e.get("output_sizes"), dtypes=e.get("input_dtypes"),
            retired=bool(e.get("retired")), created_ns=_int(e.get("time_created_ns")),
            timeout_ms=_int(timeout) if timeout is not None else None))
    out: dict[str, GroupTail] = {}
    for name, ops in by_group.items():
        ops.sort(key=lambda o: o.seq)
        out[name] = GroupTail(name=name, desc=descs[name], last_seq=ops[-1].seq, ops=tuple(ops[-keep:]))
    return out


def dumps_tail(tails: Mapping[str, GroupTail]) -> str:
    """The compact JSON stored in `collective_traces.pg_tail`."""
    return json.dumps({name: {"desc": t.desc, "last_seq": t.last_seq, "ops": [
        [o.seq, o.op, o.input_sizes, o.output_sizes, o.dtypes, int(o.retired), o.created_ns, o.timeout_ms]
        for o in t.ops]} for name, t in tails.items()}, separators=(",", ":"))


def loads_tail(text: str) -> dict[str, GroupTail]:
    """`dumps_tail`'s inverse; ValueError on anything else."""
    doc = json.loads(text)
    if not isinstance(doc, dict):
        raise ValueError("pg_tail must be a JSON object")
    out: dict[str, GroupTail] = {}
    for name, g in doc.items():
        ops = tuple(Op(seq=int(o[0]), op=str(o[1]), input_sizes=o[2], output_sizes=o[3], dtypes=o[4],
                       retired=bool(o[5]), created_ns=int(o[6]), timeout_ms=None if o[7] is None else int(o[7]))
                    for o in g["ops"])
        out[str(name)] = GroupTail(name=str(name), desc=str(g.get("desc", "")), last_seq=int(g["last_seq"]), ops=ops)
    return out
