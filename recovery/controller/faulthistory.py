"""Each host's hardware fault history as the controller remembers it: `vigil recovery status` shows it (pure).

From the folded log: every hardware or hang recovery that suspected the host (`fleetmemory.suspects`: its
culprits, not the victims only an exit named), newest first, with when it opened, what triggered it (source,
category, cause, summary), how it ended and whether the host was cordoned by it; how many of them fall in
fleet memory's window (`policy.repeat_window_s`) against its limit (`policy.repeat_faults`: at the limit the
next one condemns the host whatever its self-test says); and the host's cordon now, if any. Bounded: the
controller keeps a day of recoveries (`compaction`), and at most `limit` are listed per host.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from vigil.recovery.controller.fleetmemory import HARD, suspects
from vigil.recovery.controller.steps import short_id

if TYPE_CHECKING:
    from vigil.recovery.backends.base import CordonInfo
    from vigil.recovery.controller.state import ClusterState


def fault_history(state: ClusterState, cordoned: dict[str, CordonInfo], now: datetime, *, window_s: float,
                  repeat_faults: int, limit: int = 20) -> dict[str, Any]:
    """Per host: its hardware/hang/sdc recoveries (newest first), the count in fleet memory's window, its cordon."""
    hosts: dict[str, list[dict[str, Any]]] = {}
    for case in state.cases.values():
        if case.cls not in HARD or case.opened_at is None or case.skipped:
            continue
        d, o = case.details, case.outcome
        for host in suspects(case):
            hosts.setdefault(host, []).append({
                "at": case.opened_at, "recovery": short_id(case.case_id), "job": case.job_id, "class": case.cls,
                "source": str(d.get("source", "")), "category": str(d.get("category", "")),
                "cause": str(d.get("cause", "")), "summary": str(d.get("summary", ""))[:300],
                "result": o.result if o is not None else "open",
                "cordoned": bool(o is not None and host in (o.cordoned or []))})
    since = now - timedelta(seconds=window_s)
    out: dict[str, Any] = {}
    for host in sorted(set(hosts) | set(cordoned)):
        faults = sorted(hosts.get(host, []), key=lambda f: f["at"], reverse=True)
        c = cordoned.get(host)
        out[host] = {"faults": faults[:limit], "total": len(faults),
                     "in_window": sum(1 for f in faults if f["at"] >= since), "repeat_limit": repeat_faults,
                     "cordon": {"reason": c.reason, "by": c.by, "at": c.at} if c is not None else None}
    return out


def format_faults(doc: dict[str, Any]) -> list[str]:
    lines = ["fault history:" if doc else "fault history: none"]
    for host, h in doc.items():
        limit = f" of {h['repeat_limit']}" if h["repeat_limit"] else ""
        cordon = f"; cordoned ({str(h['cordon']['reason'])[:60]})" if h["cordon"] else ""
        lines.append(f"  {host}: {h['total']} hardware/hang/sdc recoveries, {h['in_window']}{limit} in fleet memory's "
                     f"window{cordon}")
        for f in h["faults"]:
            at = f["at"].strftime("%Y-%m-%d %H:%M:%S") if isinstance(f["at"], datetime) else str(f["at"])
            what = "/".join(x for x in (f["source"], f["category"], f["cause"]) if x)
            lines.append(f"    {at} {f['recovery']} [{f['class']}] {what}: {f['result']}"
                         f"{', cordoned' if f['cordoned'] else ''}  {f['summary'][:100]}")
    return lines
