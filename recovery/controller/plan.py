"""Decisions as pure functions: the steps of a recovery, the next world, the safety limits.

* `steps_for`: hardware -> pause, diagnose, cordon, restart, or pause, cordon, restart when a
  culprit is strong (an explicit hardware error names its host: it goes whatever a test says,
  and the restart does not wait ~10 s of self-checks; `policy.diagnose_explicit`); software -> pause, restart, or
  pause, halt once the job restarted `policy.crash_loops` times without a new checkpoint;
  hang -> dump, pause, diagnose, cordon, restart (the cordon takes strong hardware culprits and
  what the diagnostics found); manual mode puts `approve` first. A job's first start is
  `start`; a scale-up is pause, restart.
* `plan_world`: the hosts of the next generation — the previous world's hosts that are still
  eligible (alive, not cordoned or condemned, not running), then new hosts, spares last — as
  many as the job accepts (`nodes_max`, rounded down to a multiple of `node_multiple`), none
  when fewer than `nodes_min`. Node rank 0 hosts the rendezvous on its first announced port.
* `cordon_allowance`: the circuit breaker — at most `max_cordons_per_hour` cordons by the
  controller in any rolling hour (cluster-wide) and at most `max_job_fraction` of a job's
  hosts cordoned at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from vigil.contract import Member
from vigil.recovery.controller.state import ClusterState, Job
from vigil.recovery.settings import BreakerSettings, Mode, PolicySettings

ELIGIBLE = ("waiting", "exited")


def steps_for(cls: str, mode: Mode, policy: PolicySettings, *, crash_loop: bool = False,
              explicit: bool = False) -> list[str]:
    """The steps of a recovery of class `cls`; `explicit`: a hardware culprit is strong (`explicit_culprit`)."""
    if cls == "start":
        return ["start"]
    if cls == "scale":
        steps = ["pause", "restart"]
    elif cls == "hardware":
        diagnose = policy.diagnose_hardware and (policy.diagnose_explicit or not explicit)
        steps = ["pause", *(["diagnose"] if diagnose else []), "cordon", "restart"]
    elif cls == "hang":
        steps = ["dump", "pause", *(["diagnose"] if policy.diagnose_hang else []), "cordon", "restart"]
    else:
        steps = ["pause", "halt"] if crash_loop else ["pause", "restart"]
    return ["approve", *steps] if mode == "manual" else steps


def explicit_culprit(cls: str, culprits: Iterable[Mapping[str, Any]]) -> bool:
    """A hardware failure that names its host by an explicit error (a strong culprit: an Xid, ECC or NVLink line,
    an incident of strong confidence) and no other suspect: that host goes without diagnostics
    (`policy.diagnose_explicit`). A weak culprit beside it that only an exit named is its victim; any other
    (a lost heartbeat, a weak incident) is a suspect the diagnostics must judge."""
    cs = list(culprits)
    return (cls == "hardware" and any(bool(c.get("strong")) for c in cs)
            and all(bool(c.get("strong")) or bool(c.get("from_exit")) for c in cs))


def restarts_without_progress(state: ClusterState, job: Job) -> int:
    """Restarts of `job` since its latest committed checkpoint (all of them when it has none)."""
    since = job.committed.ts if job.committed is not None else None
    n = 0
    for cid in job.cases:
        case = state.cases[cid]
        step = case.step("restart", job.job_id)
        if step is not None and step.started_at is not None and (since is None or step.started_at > since):
            n += 1
    return n


def alive(member: Member, now: datetime, stale_s: float) -> bool:
    return member.state != "left" and (now - member.ts).total_seconds() <= stale_s


@dataclass(frozen=True, kw_only=True)
class WorldPlan:
    hosts: list[str]
    master_addr: str
    master_port: int


def node_range(members: Iterable[Member]) -> tuple[int, int, int]:
    """(min, max, multiple) the job's agents announced (the most common announcement)."""
    counts: dict[tuple[int, int, int], int] = {}
    for m in members:
        key = (m.nodes_min, m.nodes_max, m.node_multiple)
        counts[key] = counts.get(key, 0) + 1
    return max(counts, key=lambda k: counts[k]) if counts else (1, 1, 1)


def plan_world(job: Job, *, exclude: set[str], now: datetime, stale_s: float,
               states: tuple[str, ...] = ELIGIBLE) -> WorldPlan | str:
    """The next world of `job`, or why there is none."""
    lo, hi, multiple = node_range(job.members.values())
    ok = {h: m for h, m in job.members.items()
          if h not in exclude and alive(m, now, stale_s) and m.state in states and m.ports and m.ip}
    order = [h for h in job.world if h in ok]
    order += sorted(h for h, m in ok.items() if h not in order and not m.spare)
    order += sorted(h for h, m in ok.items() if h not in order)
    n = min(len(order), hi) // multiple * multiple
    if n < lo or n == 0:
        return (f"{len(order)} eligible hosts ({', '.join(order) or 'none'}); the job needs {lo}..{hi}"
                f"{f' in multiples of {multiple}' if multiple > 1 else ''}")
    hosts = order[:n]
    master = ok[hosts[0]]
    return WorldPlan(hosts=hosts, master_addr=master.ip, master_port=master.ports[0])


def job_hosts(job: Job) -> set[str]:
    return set(job.members) | set(job.world)


def cordon_allowance(state: ClusterState, job: Job, breaker: BreakerSettings, now: datetime,
                     cordoned: set[str]) -> tuple[int, str]:
    """How many more hosts of `job` the controller may cordon now, and the limit that binds."""
    hour = [c for c in state.cordons.values() if now - c.ts < timedelta(hours=1)]
    by_rate = breaker.max_cordons_per_hour - len(hour)
    hosts = job_hosts(job)
    by_share = math.floor(breaker.max_job_fraction * len(hosts)) - len(cordoned & hosts)
    if by_rate <= by_share:
        why = f"{len(hour)} cordons in the last hour (limit {breaker.max_cordons_per_hour})"
    else:
        why = (f"{len(cordoned & hosts)} of the job's {len(hosts)} hosts cordoned "
               f"(limit {breaker.max_job_fraction:.0%})")
    return max(0, min(by_rate, by_share)), why
