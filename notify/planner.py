"""Deciding what to send: the current groups against the notification log (what each receiver was told).

Like Alertmanager's notification log, the decision is state-based, not event-based: for each
(group, receiver) the planner compares what the group pages about now with the last
notification that receiver got, so re-reading events, restarting, or ticking twice never
sends the same thing twice. Per (group, receiver):

    never told, or told it resolved   firing for `group_wait_s`                      -> firing  (new)
    told it fires                     what it pages about changed, `group_interval_s`
                                      after the last send                            -> firing  (update)
                                      nothing fires any more (silenced is not ended),
                                      `group_interval_s` after the last send         -> resolved
                                      unchanged, still re-published by the analyzer,
                                      `repeat_interval_s` after the last send         -> firing  (repeat)

A group that disappeared (its alerts moved into an incident, or were forgotten) while its
receiver was told it fires gets its resolve. Pure: groups, log and wall-clock seconds in.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from vigil.notify.grouping import Group

Status = Literal["firing", "resolved"]
Reason = Literal["new", "update", "repeat", "resolved", "test"]


@dataclass(frozen=True, kw_only=True)
class Sent:
    """The last notification of one group to one receiver (a row of the notification log)."""

    seq: int
    status: Status
    firing: tuple[str, ...]
    digest: str
    at: float  # wall-clock seconds when it was decided
    last_seen: datetime
    job_id: str
    route: str


@dataclass(kw_only=True)
class NotifyLog:
    entries: dict[tuple[str, str], Sent] = field(default_factory=dict)  # (group key, receiver) -> last sent

    def get(self, group_key: str, receiver: str) -> Sent | None:
        return self.entries.get((group_key, receiver))

    def record(self, group_key: str, receiver: str, sent: Sent) -> None:
        held = self.entries.get((group_key, receiver))
        if held is None or sent.seq > held.seq:
            self.entries[(group_key, receiver)] = sent


@dataclass(frozen=True, kw_only=True)
class Decision:
    group_key: str
    receiver: str
    seq: int
    status: Status
    reason: Reason
    group: Group | None  # None: the group is gone, this resolves what the receiver was told
    previous: Sent | None
    anchor: float = 0.0  # the previous decision's time, else when the group started firing: with the sequence
    # number it makes the idempotency key, the same when a decision whose save failed is taken again


def _decide(g: Group, receiver: str, prev: Sent | None, since: float | None, now: float) -> Decision | None:
    firing = g.firing()
    t = g.timing

    def decision(status: Status, reason: Reason) -> Decision:
        return Decision(group_key=g.key, receiver=receiver, seq=(prev.seq if prev else 0) + 1, status=status,
                        reason=reason, group=g, previous=prev, anchor=prev.at if prev else since or now)

    if prev is None or prev.status == "resolved":
        if firing and since is not None and now - since >= t.group_wait_s:
            return decision("firing", "new")
        return None
    waited = now - prev.at
    if not firing:
        if g.firing(include_muted=True) or waited < t.group_interval_s:
            return None  # silenced is not ended: no resolve while a silence holds it
        return decision("resolved", "resolved")
    if g.digest() != prev.digest:
        return decision("firing", "update") if waited >= t.group_interval_s else None
    if waited >= t.repeat_interval_s and g.last_seen() > prev.last_seen:
        return decision("firing", "repeat")
    return None


def plan(groups: Iterable[Group], log: NotifyLog, since: dict[str, float], now: float) -> list[Decision]:
    """The notifications due at `now`. `since` (group key -> when it started firing) is kept across calls."""
    out: list[Decision] = []
    present: set[tuple[str, str]] = set()
    keys: set[str] = set()
    for g in groups:
        keys.add(g.key)
        if g.firing():
            since.setdefault(g.key, now)
        else:
            since.pop(g.key, None)
        for r in g.receivers:
            present.add((g.key, r))
            d = _decide(g, r, log.get(g.key, r), since.get(g.key), now)
            if d is not None:
                out.append(d)
    for gone in set(since) - keys:
        del since[gone]
    for (key, receiver), prev in sorted(log.entries.items()):
        if prev.status == "firing" and (key, receiver) not in present:
            out.append(Decision(group_key=key, receiver=receiver, seq=prev.seq + 1, status="resolved",
                                reason="resolved", group=None, previous=prev, anchor=prev.at))
    return out
