"""The goodput ledger: a job's wall clock over a window split into where the time went.

Categories (seconds), each from the record that owns it:
- productive: distinct steps completed x the ideal step time (vigil.contract.goodput: ETTR = productive / wall);
- slowdown: per distinct step, its time above the ideal (a straggler, a throttled GPU, a slow NIC), charged
  to the hosts whose compute phases ran longer than their peers', in proportion (`slowdown_by`);
- checkpoint_save: training blocked by checkpoint saves (the ranks' `checkpoint` events, `blocked_ms`);
- steps_redone: the steps lost to each recovery (completed before the fault - restored) x the ideal;
- detect, decide, pause, diagnose, restart, restore: each recovery's outcome time split (restart without the
  checkpoint load, which is restore);
- idle: the rest of the wall clock (launch, waits nothing above explains).
The categories sum to the wall clock; where the records claim more than the wall clock (they overlap),
`over_s` says by how much and idle is 0: `balanced()` is the check (within 0.5 %).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

RECOVERY = ("detect", "decide", "pause", "diagnose", "restart", "restore")
CATEGORIES = ("productive", "slowdown", "checkpoint_save", "steps_redone", *RECOVERY, "idle")
TOLERANCE = 0.005


@dataclass(frozen=True, kw_only=True)
class Ledger:
    wall_s: float
    seconds: dict[str, float] = field(default_factory=dict)  # by category, CATEGORIES' order
    over_s: float = 0.0  # what the records claim beyond the wall clock
    slowdown_by: dict[str, float] = field(default_factory=dict)  # slowdown seconds charged to each host

    @property
    def ettr(self) -> float | None:
        return self.seconds["productive"] / self.wall_s if self.wall_s > 0 else None

    def balanced(self) -> bool:
        """The categories sum to the wall clock within 0.5 %."""
        return self.wall_s > 0 and abs(sum(self.seconds.values()) - self.wall_s) <= TOLERANCE * self.wall_s


def ledger(*, wall_s: float, ideal_ms: float, step_ms: Iterable[float | tuple[float, float]],
           save_blocked_ms: Iterable[float] = (), outcomes: Iterable[Mapping[str, float | int | None]] = (),
           excess_ms: Mapping[str, float] | None = None) -> Ledger:
    """Split `wall_s`: `step_ms` one time per distinct step completed in it (or (time, share): the share of a
    step the window's start cuts), `outcomes` the recoveries that ended in it (their detect_s ... restart_s,
    checkpoint_load_s, steps_lost); `excess_ms`: per host its compute time above its peers' (the slowdown is
    charged to hosts in proportion)."""
    times = [t if isinstance(t, tuple) else (t, 1.0) for t in step_ms]
    s = dict.fromkeys(CATEGORIES, 0.0)
    s["productive"] = sum(share for _, share in times) * ideal_ms / 1000
    s["slowdown"] = sum(share * max(0.0, t - ideal_ms) for t, share in times) / 1000
    s["checkpoint_save"] = sum(save_blocked_ms) / 1000
    for o in outcomes:
        load = float(o.get("checkpoint_load_s") or 0.0)
        for k in ("detect", "decide", "pause", "diagnose"):
            s[k] += float(o.get(f"{k}_s") or 0.0)
        s["restart"] += max(0.0, float(o.get("restart_s") or 0.0) - load)
        s["restore"] += load
        s["steps_redone"] += int(o.get("steps_lost") or 0) * ideal_ms / 1000
    claimed = sum(s.values())
    s["idle"] = max(0.0, wall_s - claimed)
    excess = {h: v for h, v in (excess_ms or {}).items() if v > 0}
    total = sum(excess.values())
    by = {h: round(s["slowdown"] * v / total, 3) for h, v in sorted(excess.items(), key=lambda kv: -kv[1])}
    return Ledger(wall_s=wall_s, seconds={k: round(v, 3) for k, v in s.items()},
                  over_s=round(max(0.0, claimed - wall_s), 3), slowdown_by=by)
