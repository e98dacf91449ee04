"""Fleet memory: a host that keeps failing is condemned even when its self-test passes (pure).

A GPU that throws the same class of hardware fault again and again (an Xid 48 a day, a link that flaps
every few hours) often passes a short diagnostics round in between. `repeat_offenders` names the hosts a
hardware or hang recovery suspects (its culprits, except victims only an exit named) that were culprits of
at least `policy.repeat_faults - 1` other hardware or hang recoveries that opened within
`policy.repeat_window_s` before this one: with this one, `repeat_faults` in the window. Only the same fault
repeats (issue 49): two recoveries count together when their fault classes (`details.fault_classes`: each
Xid's catalog cause, `xid:memory`, else the fact's category, `ecc`) meet, or when either has none (a hang, an
exit: the host's word is all there is). An Xid 48 a day counts; an Xid 48 then an NVLink 74 then a hang of
different classes do not condemn the host by themselves. The cordon step
takes them whatever the diagnostics say. The controller keeps every finished recovery for a day
(`compaction.Retention.keep`), so a window up to a day sees all of them; `repeat_faults` 0 turns it off.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from vigil.recovery.controller.triggers import SDC_CLASS

if TYPE_CHECKING:
    from vigil.recovery.controller.state import Case, ClusterState
    from vigil.recovery.settings import PolicySettings

HARD = ("hardware", "hang", SDC_CLASS)


def suspects(case: Case) -> set[str]:
    return {str(c["host"]) for c in case.details.get("culprits", []) if not c.get("from_exit")}


def classes(case: Case) -> set[str]:
    return {str(c) for c in case.details.get("fault_classes", [])}


def repeat_offenders(state: ClusterState, case: Case, policy: PolicySettings) -> list[str]:
    """The hosts `case` suspects whose hardware faults repeat (see the module docstring), sorted."""
    if policy.repeat_faults < 1 or case.cls not in HARD or case.opened_at is None:
        return []
    since = case.opened_at - timedelta(seconds=policy.repeat_window_s)
    counts = dict.fromkeys(suspects(case), 1)
    mine = classes(case)
    for other in state.cases.values():
        if other is case or other.cls not in HARD or other.opened_at is None or other.skipped:
            continue
        theirs = classes(other)
        if mine and theirs and not mine & theirs:
            continue  # another kind of fault: not a repeat
        if not since <= other.opened_at <= case.opened_at:
            continue
        for host in suspects(other) & counts.keys():
            counts[host] += 1
    return sorted(h for h, n in counts.items() if n >= policy.repeat_faults)
