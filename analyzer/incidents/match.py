"""Cross-rank Flight Recorder matching: which rank(s) a hung job waits for.

As PyTorch's own analyzer (`torch/distributed/flight_recorder`, builder.py) does, the
collectives of one process group are matched across its members by `collective_seq_id`.
Per group, each member's last enqueued sequence number gives the *frontier*: the first
collective not every member reached (or, all at the same one, the one still open). Members
that reached it wait for those that did not, or sent no dump. Over every group that is a
wait-for graph; torch's analyzer stops at per-group "missing ranks" (in a run with a data-
parallel subgroup it names both the stuck rank and the rank waiting for it in the subgroup),
this follows the graph:

1. desync: members disagree on the op, sizes or dtypes of one sequence number (of a gather
   or scatter only the side every member holds: the root alone has the other) -> the
   minority are the culprits (a tie is ambiguous);
2. missing_rank: ranks awaited that wait for nobody (the sinks) are the culprits. Strong
   when a culprit's own dump shows it behind; weak when the only evidence is a missing
   dump (a lost file reads the same);
3. circular_wait: no sink (A waits for B in one group, B for A in another) -> the cycle;
4. all_reached_open: everyone is in the open collective, nobody missing: Flight Recorder
   cannot name a culprit (transport, network, or a slow rank);
5. healthy: nothing open.

Everyone who waits, directly or through others, on a culprit is a victim. Gloo facts this
relies on (torch 2.13): entry `state` is always "scheduled" and `pg_status` counts in op_id
space, so only the enqueued sequence numbers are compared; `retired` means finished, failed
included, so "open" counts only in dumps taken during the stall (the watchdog's). Pure logic.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from vigil.analyzer.incidents.flightrec import COMPARED, GroupTail, compared, thaw

Kind = Literal["desync", "desync_ambiguous", "missing_rank", "circular_wait", "all_reached_open", "healthy"]
DEFAULT_GROUP = "0"


@dataclass(frozen=True, kw_only=True)
class Frontier:
    group: str
    desc: str
    seq: int
    op: str
    sizes: object
    reached: list[int]
    missing: list[int]
    no_dump: list[int]
    open_on: list[int]
    timeout_ms: int | None


@dataclass(frozen=True, kw_only=True)
class Mismatch:
    group: str
    seq: int
    field: str
    values: dict[int, str]
    minority: list[int]
    ambiguous: bool


@dataclass(frozen=True, kw_only=True)
class Verdict:
    kind: Kind
    culprits: list[int]
    victims: list[int]
    strong: bool
    frontiers: list[Frontier] = field(default_factory=list)
    mismatches: list[Mismatch] = field(default_factory=list)
    wait_for: dict[int, list[int]] = field(default_factory=dict)
    evidence: dict[int, list[str]] = field(default_factory=dict)

    def frontier_of(self, rank: int) -> Frontier | None:
        """The collective `rank` is missing from, else the one it waits in."""
        for f in self.frontiers:
            if rank in f.missing or rank in f.no_dump:
                return f
        return next((f for f in self.frontiers if rank in f.open_on or rank in f.reached), None)


def membership(tails: Mapping[int, Mapping[str, GroupTail]], reported: Mapping[str, list[int]],
               world: set[int]) -> dict[str, set[int]]:
    """Group name -> member ranks: what the ranks reported, else inferred (the default group is the world)."""
    members = {name: set(ranks) for name, ranks in reported.items() if ranks}
    for rank, groups in tails.items():
        for name in groups:
            if name not in members:
                members[name] = set(world) if name == DEFAULT_GROUP and world else set()
            if name != DEFAULT_GROUP or not world:
                members[name].add(rank)
    return members


def _shown(value: object) -> str:
    """Sizes and dtypes as torch prints them (lists), for evidence."""
    import json

    return value if isinstance(value, str) else json.dumps(thaw(value))


def _mismatch(name: str, tails: Mapping[int, GroupTail]) -> Mismatch | None:
    seqs = sorted({o.seq for t in tails.values() for o in t.ops})
    for s in seqs:
        holders = {r: op for r, t in tails.items() if (op := t.op(s)) is not None}
        if len(holders) < 2 or len({op.sig for op in holders.values()}) < 2:
            continue
        ops = {op.op for op in holders.values()}
        for f in COMPARED if len(ops) > 1 else compared(ops.pop()):
            vals = {r: getattr(op, f) for r, op in holders.items()}
            counts = Counter(vals.values())
            if len(counts) < 2:
                continue
            (majority, n), = counts.most_common(1)
            tie = list(counts.values()).count(n) > 1
            minority = sorted(holders) if tie else sorted(r for r, v in vals.items() if v != majority)
            return Mismatch(group=name, seq=s, field=f, values={r: _shown(v) for r, v in vals.items()},
                            minority=minority, ambiguous=tie)
    return None


def _frontier(name: str, members: set[int], tails: Mapping[int, GroupTail]) -> tuple[Frontier, list[int]] | None:
    """The group's frontier and who waits at it (None: the group is idle)."""
    enq = {r: t.last_seq for r, t in tails.items()}
    no_dump = sorted(members - set(tails))
    if not enq:
        return None
    top, low = max(enq.values()), min(enq.values())
    if low < top:
        seq = low + 1
        reached = sorted(r for r, v in enq.items() if v >= seq)
        missing = sorted(r for r, v in enq.items() if v < seq)
        waiters = reached
    else:
        seq = top
        reached, missing = sorted(enq), []
        waiters = sorted(r for r, t in tails.items() if (op := t.op(seq)) is not None and not op.retired)
        if not waiters and no_dump:
            waiters = reached  # finished or failed it (gloo retires failed work too) without a member that sent nothing
        if not waiters:
            return None  # everyone finished the same last collective: idle
    ref = next((op for r in reached if (op := tails[r].op(seq)) is not None), None)
    open_on = sorted(r for r in reached if (op := tails[r].op(seq)) is not None and not op.retired)
    desc = next((t.desc for t in tails.values() if t.desc), "")
    return Frontier(group=name, desc=desc, seq=seq, op=ref.op if ref else "", sizes=thaw(ref.input_sizes) if ref else None,
                    reached=reached, missing=missing, no_dump=no_dump, open_on=open_on,
                    timeout_ms=ref.timeout_ms if ref else None), waiters


def match(tails: Mapping[int, Mapping[str, GroupTail]], reported: Mapping[str, list[int]] | None = None,
          world: set[int] | None = None) -> Verdict:
    """The verdict over one dump per rank (`tails`: rank -> group name -> its tail)."""
    members = membership(tails, reported or {}, world or set())
    frontiers: list[Frontier] = []
    mismatches: list[Mismatch] = []
    waits: dict[int, set[int]] = {}
    why: dict[tuple[int, int], list[str]] = {}
    for name in sorted(members, key=lambda n: (len(n), n)):
        group = {r: g[name] if name in g else GroupTail(name=name, desc="", last_seq=0, ops=())
                 for r, g in tails.items() if r in members[name]}
        mm = _mismatch(name, group)
        if mm is not None:
            mismatches.append(mm)
        got = _frontier(name, members[name], group)
        if got is None:
            continue
        front, waiters = got
        frontiers.append(front)
        for w in waiters:
            for m in front.missing + front.no_dump:
                waits.setdefault(w, set()).add(m)
                why.setdefault((w, m), []).append(f"group {name} ({front.desc or 'no desc'}) seq {front.seq}")
    return _verdict(set(tails), members, frontiers, mismatches, waits, why)


def _verdict(dumped: set[int], members: Mapping[str, set[int]], frontiers: list[Frontier], mismatches: list[Mismatch],
             waits: dict[int, set[int]], why: dict[tuple[int, int], list[str]]) -> Verdict:
    everyone = dumped | {r for m in members.values() for r in m}
    evidence: dict[int, list[str]] = {}
    wait_for = {r: sorted(v) for r, v in sorted(waits.items())}

    def verdict(kind: Kind, culprits: list[int], victims: list[int], strong: bool) -> Verdict:
        return Verdict(kind=kind, culprits=culprits, victims=victims, strong=strong, frontiers=frontiers,
                       mismatches=mismatches, wait_for=wait_for, evidence=evidence)

    if mismatches:
        culprits = sorted({r for mm in mismatches for r in mm.minority})
        for mm in mismatches:
            for r in mm.minority:
                others = {k: v for k, v in mm.values.items() if k not in mm.minority}
                evidence.setdefault(r, []).append(f"group {mm.group} seq {mm.seq}: {mm.field} {mm.values.get(r)} "
                                                  f"while the others have {sorted(set(others.values()))}")
        ambiguous = any(mm.ambiguous for mm in mismatches)
        return verdict("desync_ambiguous" if ambiguous else "desync", culprits, sorted(everyone - set(culprits)),
                       not ambiguous)
    awaited = {m for ms in waits.values() for m in ms}
    if not awaited:
        if frontiers:
            for f in frontiers:
                for r in f.open_on:
                    evidence.setdefault(r, []).append(f"in {f.op} (group {f.group} seq {f.seq}) with every member: "
                                                      "Flight Recorder cannot tell who is slow")
            return verdict("all_reached_open", [], [], False)
        return verdict("healthy", [], [], True)
    sinks = sorted(m for m in awaited if not waits.get(m))
    kind: Kind = "missing_rank" if sinks else "circular_wait"
    culprits = sinks or _cycles(waits)
    for m in culprits:
        waiting = sorted(r for r, ms in waits.items() if m in ms)
        places = sorted({w for r in waiting for w in why[(r, m)]})
        evidence.setdefault(m, []).append(f"awaited by ranks {waiting} in {'; '.join(places)}")
        if m not in dumped:
            evidence[m].append("sent no Flight Recorder dump (process gone, or wedged holding the GIL)")
        for f in frontiers:
            if m in f.missing:
                evidence[m].append(f"group {f.group}: its last collective is seq {f.seq - 1}, the others are in "
                                   f"seq {f.seq} ({f.op} {f.sizes})")
    victims: set[int] = set()
    for r in waits:
        if r in culprits:
            continue
        seen: set[int] = set()
        stack = [r]
        while stack:
            x = stack.pop()
            if x not in seen:
                seen.add(x)
                stack.extend(waits.get(x, ()))
        if seen & set(culprits):
            victims.add(r)
            evidence.setdefault(r, []).append("waits for " + ", ".join(
                f"rank {m} ({'; '.join(why[(r, m)])})" for m in sorted(waits[r])))
    strong = any(m in dumped for m in culprits)
    return verdict(kind, culprits, sorted(victims), strong)


def _cycles(waits: Mapping[int, set[int]]) -> list[int]:
    """Ranks in strongly connected components with no edge leaving them."""
    nodes = set(waits) | {m for ms in waits.values() for m in ms}
    reach: dict[int, set[int]] = {n: set() for n in nodes}
    for n in nodes:
        stack = list(waits.get(n, ()))
        while stack:
            x = stack.pop()
            if x not in reach[n]:
                reach[n].add(x)
                stack.extend(waits.get(x, ()))
    out: set[int] = set()
    for n in nodes:
        scc = {m for m in reach[n] if n in reach[m]} | {n}
        if len(scc) > 1 and all(reach[m] <= scc for m in scc):
            out |= scc
    return sorted(out)
