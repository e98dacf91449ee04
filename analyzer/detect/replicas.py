"""Replica digests (issue 51): data-parallel replicas of one shard must hold the same parameters; a majority names the odd.

Every `digest_every` steps each rank's step record carries a 64-bit digest of its parameter shard (vigil.timer.digest).
Ranks of the same pp/tp coordinates are replicas of one shard (a flat all-reduce leaves them bitwise equal), so at a
digest step their digests must be one value. `vote` judges each digest step of each group:

* all equal: nothing.
* a strict majority (more than half the group's replicas that reported a digest there) on one value, at least
  `min_replicas` of them: each replica off that value is named (subject `host/rankN`, `replica_mismatch`, error)
  with its host, the first judged step it differed at (kept in the walk's state while the run lasts, so a window
  that moved on still says where it began), the last step before it at which it still agreed (`good_step`: a
  snapshot at or before it is clean, the replay's starting point), the majority's and its own digest.
* no strict majority (a tie, two replicas, or every replica different): one warning `replica_mismatch` finding
  (subject `pp{pp}/tp{tp}`, host `*`) that says the replicas disagree and no one is blamed.

No verdict on data in flight: a digest step is judged only when every rank of its group has a stored step record at
or past it (stamped at or before the instant; a rank with no step in the window is gone, not a replica); until then a replica that is merely late is never counted as absent
or odd. A replica whose record of that step was lost is left out of the vote (the others still vote).

Digests are the job's claims about itself (the training process computes them; its agent ships them as the rank's
step records), never a kernel fact: a rank claimed from two hosts in the window (its host differs between records,
or one step's records name two hosts or two digests) is left out of every vote, so one host cannot vote as another's
ranks, and a verdict on them costs what the controller bounds (a rollback of the job itself; a cordon only within the
breaker: recovery/controller/replay.py).

Each finding carries the run it was judged in (`run`: the epoch's start): after the controller rolls the job back,
the replayed run's finding on the same replica is a fact about the replay, and the incident that holds it is
re-published with it (incidents/book.py), which is how the replay's verdict learns the fault came back.

False alarms: the comparison is exact, so replicas that are bitwise equal (a flat all-reduce, DDP with one bucket
order) give none: budget 0. Replicas that are not bitwise equal by construction (ZeRO/FSDP shards within the DP
group, non-deterministic reductions that differ per rank) must not report digests as replicas; every torch of a job
must be the same (vigil.timer.digest).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from vigil.analyzer.detect.base import AT, EvalContext, Finding, as_utc, last_complete_step

_DIGESTS_SQL = f"""
SELECT step, rank, any(host) AS r_host, any(pp) AS r_pp, any(tp) AS r_tp, any(digest) AS r_digest, max(ts) AS r_ts,
       uniqExact(host) AS r_hosts, uniqExact(digest) AS r_digests
FROM step_timings
WHERE job_id = {{job:String}} AND step >= {{lo:UInt64}} AND ts <= {AT} AND ts >= {{start:DateTime64(3, 'UTC')}}
  AND digest IS NOT NULL
GROUP BY step, rank ORDER BY step, rank
"""
_REACH_SQL = f"""
SELECT rank, any(pp) AS r_pp, any(tp) AS r_tp, max(step) AS r_step
FROM step_timings
WHERE job_id = {{job:String}} AND step >= {{lo:UInt64}} AND ts <= {AT} AND ts >= {{start:DateTime64(3, 'UTC')}}
GROUP BY rank
"""
Row = Mapping[str, Any]


def vote(rows: Sequence[Row], reach: Mapping[int, tuple[int, int, int]], min_replicas: int,
         first: dict[int, int] | None = None) -> list[Finding]:
    """The findings of the digest `rows` (step, rank, host, pp, tp, digest, ts) given each rank's `reach`
    (rank -> (pp, tp, highest stored step)). `first` (rank -> first step it differed) is read and updated."""
    first = {} if first is None else first
    seen: dict[int, set[str]] = defaultdict(set)  # rank -> the hosts its records were claimed from
    for r in rows:
        seen[int(r["rank"])].add(str(r["host"]))
        if int(r.get("hosts", 1)) > 1 or int(r.get("digests", 1)) > 1:
            seen[int(r["rank"])].add("*")  # two hosts or two digests for one step: conflicting claims
    disputed = {rank for rank, hosts in seen.items() if len(hosts) > 1}
    rows = [r for r in rows if int(r["rank"]) not in disputed]
    groups: dict[tuple[int, int], dict[int, dict[int, Row]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        groups[(int(r["pp"]), int(r["tp"]))][int(r["step"])][int(r["rank"])] = r
    members: dict[tuple[int, int], list[int]] = defaultdict(list)
    for rank, (pp, tp, _step) in reach.items():
        members[(pp, tp)].append(rank)
    odd: dict[int, tuple[Row, int, int, int]] = {}  # rank -> (its newest odd row, majority digest, votes, of)
    ties: dict[tuple[int, int], tuple[int, Row, int]] = {}  # group -> (step, a row of it, distinct values)
    good: dict[int, int] = {}  # rank -> the last judged step it agreed with the majority at, before it first differed
    for key, steps in sorted(groups.items()):
        for step, got in sorted(steps.items()):
            if any(reach[m][2] < step for m in members[key]):
                continue  # a replica has not reported this far: its digest may be in flight
            counts = Counter(int(r["digest"]) for r in got.values())
            value, votes = counts.most_common(1)[0]
            if len(counts) == 1 or (votes * 2 > len(got) and votes >= min_replicas):
                for rank, r in got.items():
                    if int(r["digest"]) != value:
                        first[rank] = min(first.get(rank, step), step)
                        odd[rank] = (r, value, votes, len(got))
                    elif step < first.get(rank, step + 1):
                        good[rank] = step
            else:
                ties.setdefault(key, (step, next(iter(got.values())), len(counts)))
    out = []
    for rank, (r, value, votes, of) in sorted(odd.items()):
        host, since = str(r["host"]), first[rank]
        out.append(Finding(
            alert="replica_mismatch", subject=f"{host}/rank{rank}", host=host, severity="error", since=as_utc(r["ts"]),
            summary=f"rank {rank} on {host}: parameter digest differs from {votes} of {of} replicas (pp {r['pp']}, "
                    f"tp {r['tp']}) since step {since}: silent data corruption on this replica",
            evidence={"signal": "digest", "rank": rank, "host": host, "step": since, "good_step": good.get(rank),
                      "last_step": int(r["step"]),
                      "digest": int(r["digest"]), "majority": value, "votes": votes, "replicas": of,
                      "pp": int(r["pp"]), "tp": int(r["tp"])}))
    for (pp, tp), (step, r, distinct) in sorted(ties.items()):
        out.append(Finding(
            alert="replica_mismatch", subject=f"pp{pp}/tp{tp}", host="*", severity="warning", since=as_utc(r["ts"]),
            summary=f"replicas of pp {pp} tp {tp} disagree at step {step} ({distinct} digests) with no majority: "
                    f"no replica is blamed",
            evidence={"signal": "digest", "step": step, "pp": pp, "tp": tp, "distinct": distinct, "majority": None}))
    return out


class ReplicaDetector:
    name = "replica_mismatch"
    false_alarms_per_hour = 0.0  # exact comparison of replicas that are bitwise equal: see the module docstring
    cadence_s = 10.0

    def detect(self, ctx: EvalContext) -> list[Finding]:
        s = ctx.settings.replicas
        last = last_complete_step(ctx)  # asked once per instant for every step detector: the window costs nothing more
        if last is None or ctx.epoch is None or not ctx.stored("step"):
            return []
        run = {"start": ctx.run_start(), "lo": max(ctx.epoch.first_step, last - s.window_steps + 1)}
        rows = [{k.removeprefix("r_"): v for k, v in r.items()} for r in ctx.rows(_DIGESTS_SQL, **run)]
        if not rows:  # a job that reports no digests costs this one read of its window
            return []
        reach = {int(r["rank"]): (int(r["r_pp"]), int(r["r_tp"]), int(r["r_step"]))
                 for r in ctx.rows(_REACH_SQL, **run)}
        kept = ctx.state.get("replica_first")
        if kept is None or kept[0] != ctx.epoch.index:
            kept = (ctx.epoch.index, {})
            ctx.state["replica_first"] = kept
        judged_in = ctx.epoch.start.isoformat()  # which run: a replay's finding is news (incidents.book)
        return [dataclasses.replace(f, evidence={**f.evidence, "run": judged_in}) for f in
                vote(rows, reach, s.min_replicas, kept[1])]
